"""The configuration reference (docs/config.md), generated from the pydantic config tree.

Every section of `GapforgeConfig` becomes a table: dotted key, type, default (the value a default
config holds, so a section built with other defaults, such as `policy.endpoint`, shows its own),
the field's bounds, and its description. The checks that span fields (model and field validators)
follow each table with the messages they raise, as written in the code.

    python -m gapforge.config_reference > docs/config.md
"""

from __future__ import annotations

import ast
import enum
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel, SecretStr

from gapforge.config import _ENV_OVERRIDES, GapforgeConfig

REGENERATE = "python -m gapforge.config_reference > docs/config.md"

_BOUNDS = ((at.Gt, "gt", "> {}"), (at.Ge, "ge", "≥ {}"), (at.Lt, "lt", "< {}"), (at.Le, "le", "≤ {}"),
           (at.MultipleOf, "multiple_of", "multiple of {}"), (at.MinLen, "min_length", "length ≥ {}"),
           (at.MaxLen, "max_length", "length ≤ {}"))


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
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`" if not isinstance(value, (list, dict, tuple)) else f"`{_plain(value)}`"


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


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
            if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args
                    and getattr(node.exc.func, "id", "") == "ValueError"):
                text = _message(node.exc.args[0])
                if text and text not in messages:
                    messages.append(text)
    return messages


def _section(prefix: str, instance: BaseModel, description: str, out: list[str], level: int) -> None:
    model = type(instance)
    doc = inspect.getdoc(model) or ""
    if doc.startswith(f"{model.__name__}(") or model.__doc__ is None or model.__doc__ is BaseModel.__doc__:
        doc = ""
    out += [f"{'#' * level} `{prefix}`" if prefix else f"{'#' * level} top level", ""]
    intro = " ".join(t for t in (description, doc.split("\n\n")[0].replace("\n", " ")) if t)
    if intro:
        out += [intro, ""]
    rows, subsections = [], []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        value = getattr(instance, name)
        if isinstance(value, BaseModel):
            subsections.append((key, value, field.description or ""))
            continue
        rows.append(f"| `{key}` | {_cell(type_name(field.annotation))} | {_cell(default_text(value))} "
                    f"| {_cell(bounds(field.metadata))} | {_cell(field.description or '')} |")
    if rows:
        out += ["| key | type | default | bounds | description |", "| --- | --- | --- | --- | --- |", *rows, ""]
    checks = validator_messages(model)
    if checks:
        out += ["Checks on load (the error says what to change):", ""]
        out += [f"- {' '.join(m.split())}" for m in checks]
        out += [""]
    for key, value, desc in subsections:
        _section(key, value, desc, out, min(level + 1, 4))


def render() -> str:
    """docs/config.md: every field of the config tree with its type, default, bounds and description."""
    out = [
        "# Configuration reference",
        "",
        f"Generated from the pydantic models by `{REGENERATE}`; `tests/gapforge/test_config_docs.py` fails when this",
        "file is stale. Every command takes `--config FILE` (YAML) and `--set dotted.key=value` (the value is parsed as",
        "YAML); unknown keys are refused with a one-line error and exit code 2. `gapforge config show` prints the",
        "effective tree. Sections are composed in `gapforge/config.py`; each lives beside the code that reads it.",
        "",
        "Environment variables read by the loader (and nowhere else):",
        "",
        "| variable | sets |",
        "| --- | --- |",
        *[f"| `{var}` | `{key}` |" for var, key in _ENV_OVERRIDES.items()],
        "| `OPENAI_API_KEY`, or the name in `*.endpoint.api_key_env` | an endpoint's key (never a config field, never printed) |",
        "",
    ]
    _section("", GapforgeConfig(), "", out, 2)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
