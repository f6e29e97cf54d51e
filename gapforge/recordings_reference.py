"""The recorded-answers reference (docs/recordings.md), generated from the pydantic models that validate each LLM role's
answer.

Every role that can answer from a file gets a section: the prompt name it answers, the file and key it is read from, the
answer's fields (from the model's `model_json_schema()`: field, type, required, description) and a minimal example as it
appears in the file; the roles themselves are data in gapforge/recordings_roles.py.
tests/gapforge/test_recordings_docs.py fails when the page is stale and feeds every example through the loader that
reads it, into the model that validates it.

    python -m gapforge.recordings_reference > docs/recordings.md
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from gapforge.recordings_roles import ROLES, Role

REGENERATE = "python -m gapforge.recordings_reference > docs/recordings.md"


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return "object"
    if "anyOf" in prop:
        return " | ".join(_type(p) for p in prop["anyOf"])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    kind = prop.get("type")
    if kind == "array":
        return f"list[{_type(prop['items'])}]" if "items" in prop else "list"
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null"}.get(
        kind, kind or "any"
    )


def _nested(prop: dict[str, Any], defs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(path suffix, the object schema) of a property that holds objects of a model."""
    if "$ref" in prop:
        return "", defs[prop["$ref"].rsplit("/", 1)[-1]]
    items = prop.get("items", {})
    if prop.get("type") == "array" and "$ref" in items:
        return "[]", defs[items["$ref"].rsplit("/", 1)[-1]]
    return None


def schema_rows(
    schema: dict[str, Any], defs: dict[str, Any] | None = None, prefix: str = ""
) -> list[tuple[str, str, str, str]]:
    """(field, type, required, description) for every field of a JSON schema, nested models flattened (`labels[].label`)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    rows = []
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        required = (
            "yes"
            if name in schema.get("required", [])
            else f"no (default `{json.dumps(prop['default'])}`)"
            if "default" in prop
            else "no"
        )
        rows.append((path, _type(prop), required, prop.get("description", "")))
        inner = _nested(prop, defs)
        if inner is not None:
            rows += schema_rows(inner[1], defs, f"{path}{inner[0]}.")
    return rows


class _Dumper(yaml.SafeDumper):
    """YAML as a person writes it: multi-line strings as literal blocks."""


_Dumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None)
)


def file_text(example: dict[str, Any]) -> str:
    """An example file as YAML (what the page shows; the test loads this text back)."""
    return yaml.dump(example, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section(role: Role) -> list[str]:
    out = [f"## {role.title}", "", f"- prompt name: `{role.prompt}`", f"- read from: {role.read_from}", ""]
    if role.schema is None:
        out += ["The answer is text.", ""]
    else:
        doc = role.schema.model_json_schema()
        out += [
            f"The answer validates against `{role.schema.__module__}.{role.schema.__name__}`"
            + (f": {doc['description'].rstrip('.')}." if doc.get("description") else "."),
            "",
        ]
        out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
        out += [f"| `{f}` | {_cell(t)} | {r} | {_cell(d)} |" for f, t, r, d in schema_rows(doc)]
        out += [""]
    out += [f"- {' '.join(n.split())}" for n in role.notes]
    out += ["", "A minimal file:", "", "```yaml", file_text(role.file_example).rstrip(), "```", ""]
    return out


def render() -> str:
    """docs/recordings.md: every LLM role's recorded-answer format, its schema and an example."""
    out = [
        "# Recorded LLM answers",
        "",
        f"Generated from the answer models by `{REGENERATE}`; `tests/gapforge/test_recordings_docs.py` fails when this",
        "file is stale and reads every example below through the loader that reads it into the model that validates it.",
        "",
        "Every LLM role can answer from a file instead of an endpoint: `llm.kind: scripted` (the default) for the analyst,",
        "the generator and the reviewer, `policy.kind: scripted` for the policy. The files are YAML (or JSON) read by",
        "`ScriptedChatModel` (`agents/scripted.py`), which answers by prompt name. Under a prompt name:",
        "",
        "- a list of answers, consumed in order (running out stops the command with one line naming the prompt);",
        "- `{repeat: ANSWER}`: the same answer every time.",
        "",
        "An answer is a string (text) or a mapping with `content` (text), `tool_calls` (a list of `name`, `arguments`,",
        "optional `id`) and `structured` (the object a structured call asks for: the analyst's answers). The answer",
        "of a structured role is validated by the model named in its section, as an endpoint's answer would be; a",
        "malformed one is re-asked once with the error, and the re-ask takes the next answer of the list.",
        "",
        "| role | prompt name | read from |",
        "| --- | --- | --- |",
        *[
            f"| [{r.title}](#{r.title.lower().replace(':', '').replace(' ', '-')}) | `{r.prompt}` | {_cell(r.read_from)} |"
            for r in ROLES
        ],
        "",
    ]
    for role in ROLES:
        out += _section(role)
    out += [
        "## Roles with no recorded form",
        "",
        "- The user simulator: `rollouts.user: llm` talks to `llm.endpoint` (or, with `rollouts.user_endpoint: policy`, the",
        "  served policy). Offline, `rollouts.user: scripted` plays each env's own scripted user instead.",
        "- The router asks no LLM: it reads the base model's next-token log-probabilities of its labels, or a classifier",
        "  over the base's hidden state (`routing.backend`).",
        "",
        "## The demo's recordings, and your own",
        "",
        "`gapforge demo` runs with `llm.kind: scripted` and no `llm.scripted_path`: the analyst is the built-in recorded",
        "analyst of `shop`, the generator and the reviewer answer from `gapforge/demo_data/recordings/shop.yaml` (with the",
        "modules under `gapforge/demo_data/recordings/shop/`), and GEPA's reflection, when enabled, from",
        "`agents/recorded/shop_reflection.yaml`. The policy is a real model.",
        "",
        "For your own target, write the files in the formats above and point the config at them:",
        "",
        "```yaml",
        "llm:",
        "  kind: scripted",
        "  scripted_path: analyst.yaml       # analyst_discover, analyst_label (and gepa_reflection)",
        "synthesis:",
        "  recordings: synthesis.yaml        # synthesis_generator, synthesis_reviewer",
        "policy:",
        "  kind: scripted",
        "  scripted_path: policy.yaml        # policy and/or tasks",
        "```",
        "",
        "A real run's answers are a starting point: `gapforge ui` shows its capability dictionary (names and definitions),",
        "and its generated modules are at `WORKSPACE/synthetic_envs/RUN/CAPABILITY/attempt-N.py` (a `code_file:` can name one).",
    ]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
