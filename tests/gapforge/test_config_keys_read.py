"""Every config key is read by product code: a key nothing reads is a promise the product does not keep.

Read means: the key's field name is accessed as an attribute (`cfg.section.name`, `th.name`) in a product module,
outside the config models' own class bodies and the reference generator (gapforge/config_reference.py), in a module
that also names the section: its key (`.routing`), its model's class, or a name some product module annotates with
that class (StageDeps' `readiness: GRPOReadinessConfig`, a router's `config: RoutingConfig`); or a method or property
of the model that reads `self.name` is itself read that way. Other keys read only by name at run time are listed in
DYNAMIC, each with where and why.
"""

from __future__ import annotations

import ast
import tomllib
import typing
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from gapforge.config import GapforgeConfig

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {ROOT / "gapforge" / "config_reference.py"}

# key -> why no attribute access reads it
DYNAMIC = {
    "rollouts.env_args": "folded into rollouts.env (as ?key=value) by RolloutConfig's before-validator on load",
}


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    out = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    for arg in typing.get_args(annotation):
        out += _models(arg)
    return out


def config_keys(model: type[BaseModel] = GapforgeConfig, prefix: str = "") -> list[tuple[str, type[BaseModel], str]]:
    """(dotted key, the model holding it, field name) of every field of the tree, sub-sections included."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append((prefix + name, model, name))
        for sub in _models(field.annotation)[:1]:
            keys += config_keys(sub, f"{prefix}{name}.")
    return keys


def product_files() -> list[Path]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = pyproject["tool"]["setuptools"]["package-dir"].values()
    return sorted(
        p for d in folders for p in (ROOT / d).rglob("*.py") if "demo_data" not in p.parts and p not in SKIPPED
    )


def _annotated(node: ast.AST) -> tuple[str | None, ast.expr | None]:
    """(the name, its annotation) of an annotated assignment, dataclass field or parameter."""
    if isinstance(node, ast.AnnAssign):
        target = node.target
        name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
        return name, node.annotation
    if isinstance(node, ast.arg):
        return node.arg, node.annotation
    return None, None


@cache
def scan() -> tuple[dict[str, set[Path]], dict[str, dict[str, set[str]]], dict[str, set[str]]]:
    """(attribute name -> the product modules reading it outside the config models; model class name ->
    {method name: the fields it reads as self.x}; model class name -> the names annotated with it)."""
    model_names = {m.__name__ for _, m, _ in config_keys()} | {GapforgeConfig.__name__}
    reads: dict[str, set[Path]] = {}
    methods: dict[str, dict[str, set[str]]] = {}
    aliases: dict[str, set[str]] = {}
    for path in product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in model_names:
                inside |= {id(n) for n in ast.walk(node)}
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef):
                        methods.setdefault(node.name, {})[fn.name] = {
                            n.attr
                            for n in ast.walk(fn)
                            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                        }
        for node in ast.walk(tree):
            name, annotation = _annotated(node)
            for ref in ast.walk(annotation) if name and annotation is not None else ():
                if isinstance(ref, ast.Name) and ref.id in model_names:
                    aliases.setdefault(ref.id, set()).add(name)
            if id(node) in inside:
                continue
            if isinstance(node, ast.Attribute):
                reads.setdefault(node.attr, set()).add(path)
            elif isinstance(node, ast.Name):  # a class or a variable named in the module
                reads.setdefault(f"class:{node.id}", set()).add(path)
                reads.setdefault(f"name:{node.id}", set()).add(path)
    return reads, methods, aliases


def is_read(key: str, model: type[BaseModel], name: str) -> bool:
    reads, methods, aliases = scan()
    section = key.split(".")[-2] if "." in key else None
    names_section = reads.get(section or "", set()) | reads.get(f"class:{model.__name__}", set())
    for alias in aliases.get(model.__name__, set()):
        names_section |= reads.get(alias, set()) | reads.get(f"name:{alias}", set())

    def read_in_section_module(attr: str) -> bool:
        modules = reads.get(attr, set())
        return bool(modules & names_section) if section else bool(modules)

    if read_in_section_module(name):
        return True
    own = methods.get(model.__name__, {})
    return any(name in fields and read_in_section_module(method) for method, fields in own.items())


def test_every_config_key_is_read_by_product_code() -> None:
    unread = [key for key, model, name in config_keys() if key not in DYNAMIC and not is_read(key, model, name)]
    assert not unread, f"config keys nothing reads (remove them, or list them in DYNAMIC with why): {unread}"


def test_the_dynamic_reads_are_keys_of_the_tree() -> None:
    keys = {key for key, _, _ in config_keys()}
    assert set(DYNAMIC) <= keys, f"DYNAMIC names keys the config no longer has: {set(DYNAMIC) - keys}"


def test_the_scan_finds_an_unread_key() -> None:
    """The check can fail: a field of a section that no module reads is reported."""

    class Probe(BaseModel):
        never_read_by_anything_xyz: int = 0

    assert not is_read("evaluation.never_read_by_anything_xyz", Probe, "never_read_by_anything_xyz")
    assert is_read("training.max_steps", type(GapforgeConfig().training), "max_steps")
