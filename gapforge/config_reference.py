"""The configuration reference (docs/config.md), generated from the pydantic config tree.

Every section of `GapforgeConfig` becomes one list (sub-sections folded in), a line per key: type, default
(the value a default config holds: `executor.training` shows its own), bounds, description (a model shown twice
is described once). The checks that span fields follow each list with the messages they raise.

    python -m gapforge.config_reference > docs/config.md
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel

from gapforge.config import _ENV_OVERRIDES, GapforgeConfig

REGENERATE = "python -m gapforge.config_reference > docs/config.md"
KEYS_LINE = (
    "{n} keys, one row each: `- key (type, default, bounds): what it sets` (a sub-section is a heading, not a key)."
)

_BOUNDS = (
    (at.Gt, "gt", "> {}"),
    (at.Ge, "ge", "≥ {}"),
    (at.Lt, "lt", "< {}"),
    (at.Le, "le", "≤ {}"),
    (at.MinLen, "min_length", "length ≥ {}"),
)


def keys(instance: BaseModel, prefix: str = "") -> list[str]:
    """The dotted keys of the tree's values (a sub-section such as `llm.endpoint` holds keys, it is none)."""
    out = []
    for name in type(instance).model_fields:
        value = getattr(instance, name)
        out += keys(value, f"{prefix}{name}.") if isinstance(value, BaseModel) else [f"{prefix}{name}"]
    return out


def type_name(annotation: Any) -> str:
    """A short, stable spelling of a field's type: `int`, `str | None`, `"a" | "b"`, `list[str]`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a).replace("'", '"') for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def bounds(metadata: list[Any]) -> str:
    """The field's numeric and length bounds, e.g. `≥ 1, ≤ 20`."""
    out = []
    for item in metadata:
        for kind, attr, fmt in _BOUNDS:
            if isinstance(item, kind):
                out.append(fmt.format(getattr(item, attr)))
    return ", ".join(out)


def default_text(value: Any) -> str:
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`" if not isinstance(value, (list, dict, tuple)) else f"`{_plain(value)}`"


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return str(value)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _message(node: ast.expr) -> str | None:
    """The text of a raised message: a string literal, or an f-string with `{…}` for its values."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    return None


def validator_messages(model: type[BaseModel]) -> list[str]:
    """The messages of the ValueErrors a model's own validators raise (its cross-field checks)."""
    decorators = model.__pydantic_decorators__
    messages: list[str] = []
    for dec in [*decorators.model_validators.values(), *decorators.field_validators.values()]:
        if getattr(dec, "cls_ref", "").split(":")[0] != f"{model.__module__}.{model.__qualname__}":
            continue  # inherited: listed with the class that defines it
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(dec.func)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and node.exc.args
                and getattr(node.exc.func, "id", "") == "ValueError"
            ):
                text = _message(node.exc.args[0])
                if text and text not in messages:
                    messages.append(text)
    return messages


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's own docstring ("" when it has none of its own)."""
    doc = inspect.getdoc(model) or ""
    if doc.startswith(f"{model.__name__}(") or model.__doc__ is None or model.__doc__ is BaseModel.__doc__:
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def _row(key: str, field: Any, value: Any, description: str | None) -> str:
    """One list item: `- `key` (type, default, bounds): description`."""
    facts = ", ".join(
        t for t in (_flat(type_name(field.annotation)), _flat(default_text(value)), _flat(bounds(field.metadata))) if t
    )
    text = _flat(description or "")
    return f"- `{key}` ({facts})" + (f": {text}" if text else "")


def _rows(
    prefix: str, instance: BaseModel, seen: dict[type, str], rows: list[str], intro: list[str], checks: list[str]
) -> None:
    """The rows of a section, its sub-sections folded in: a model already shown elsewhere keeps its rows
    (type, default, bounds) but not its descriptions, and the intro says which key to read them at."""
    model = type(instance)
    first = seen.setdefault(model, prefix)
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        value = getattr(instance, name)
        if isinstance(value, BaseModel):
            sub = type(value)
            text = (
                f"as `{seen[sub]}`" if sub in seen else " ".join(t for t in (field.description or "", _doc(sub)) if t)
            )
            if text:
                intro.append(f"`{key}`: {text}")
            _rows(key, value, seen, rows, intro, checks)
            continue
        rows.append(_row(key, field, value, field.description if first == prefix else None))
    if first == prefix:
        checks += [m for m in validator_messages(model) if m not in checks]


def _blocks(out: list[str], *blocks: list[str]) -> None:
    """Each non-empty block of lines, then a blank line."""
    for block in blocks:
        if block:
            out += [*block, ""]


def _checks(messages: list[str]) -> list[str]:
    return ["Checks on load:", "", *[f"- {_flat(m)}" for m in messages]] if messages else []


def _section(prefix: str, instance: BaseModel, description: str, out: list[str], seen: dict[type, str]) -> None:
    """One top-level section: its intro, a line per sub-section, one table, the checks its models run on load."""
    rows: list[str] = []
    subs: list[str] = []
    checks: list[str] = []
    _rows(prefix, instance, seen, rows, subs, checks)
    intro = " ".join(t for t in (description, _doc(type(instance))) if t)
    _blocks(out, [f"## `{prefix}`"], [intro] if intro else [], [f"- {s}" for s in subs], rows, _checks(checks))


def render() -> str:
    """docs/config.md: every field of the config tree with its type, default, bounds and description."""
    out = [
        "# Configuration reference",
        "",
        f"Generated from the pydantic models by `{REGENERATE}`; `tests/gapforge/test_config_docs.py` fails when this",
        "file is stale. Commands take `--config FILE` (YAML) and `--set dotted.key=value` (repeatable; the value is parsed",
        "as YAML); an unknown key or a bad value is refused with one line, exit code 2. `gapforge config show` prints the",
        "effective config. Each section lives beside the code that reads it; `gapforge/config.py` composes them.",
        "",
        "Environment variables (read by the loader only):",
        "",
        "| variable | sets |",
        "| --- | --- |",
        *[f"| `{var}` | `{key}` |" for var, key in _ENV_OVERRIDES.items()],
        "| `OPENAI_API_KEY`, or the name in `*.endpoint.api_key_env` | an endpoint's key (never a config field, never printed) |",
        "",
    ]
    root = GapforgeConfig()
    seen: dict[type, str] = {GapforgeConfig: ""}
    rows = [
        _row(name, field, getattr(root, name), field.description)
        for name, field in GapforgeConfig.model_fields.items()
        if not isinstance(getattr(root, name), BaseModel)
    ]
    _blocks(
        out, ["## top level"], [KEYS_LINE.format(n=len(keys(root)))], rows, _checks(validator_messages(GapforgeConfig))
    )
    for name, field in GapforgeConfig.model_fields.items():
        value = getattr(root, name)
        if isinstance(value, BaseModel):
            _section(name, value, field.description or "", out, seen)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
