"""Structural checks of OpenAI function-tool schemas (then, when those find nothing, the JSON Schema meta-schema
through `jsonschema`: envs/target_check.py `parameters_problem`; this module runs in the validating process, never in
the sandbox), fidelity against a target env's tools, and schema-valid random arguments for the random-tool policy."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from gapforge.envs.target_check import parameters_problem

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def schema_problems(tools: Any) -> list[str]:
    """Everything wrong with a tools() answer; [] when all are valid OpenAI function schemas."""
    if not isinstance(tools, list) or not tools:
        return [f"tools() must return a non-empty list of schemas, got {type(tools).__name__} {str(tools)[:80]}"]
    problems: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            problems.append(f"{where}: expected {{'type': 'function', 'function': {{...}}}}")
            continue
        fn = tool["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{where}: function name {name!r} must match [A-Za-z0-9_-]{{1,64}}")
            continue
        where = f"tool '{name}'"
        if name in seen:
            problems.append(f"{where}: name used twice")
        seen.add(name)
        if "description" in fn and not isinstance(fn["description"], str):
            problems.append(f"{where}: description must be a string")
        problems.extend(f"{where}: {p}" for p in _parameters_problems(fn.get("parameters")))
    return problems


def _parameters_problems(params: Any) -> list[str]:
    if not isinstance(params, dict) or params.get("type") != "object":
        return [f"parameters must be a JSON schema with type 'object', got {json.dumps(params)[:120]}"]
    props = params.get("properties", {})
    if not isinstance(props, dict):
        return ["parameters.properties must be an object mapping names to schemas"]
    out = [p for key, sub in props.items() for p in _property_problems(f"parameter '{key}'", sub)]
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        out.append("parameters.required must be a list of parameter names")
    else:
        out.extend(f"required parameter '{r}' is not in properties" for r in required if r not in props)
    if not out and (problem := parameters_problem(params)):  # what the structural checks above do not look at
        out.append(f"parameters: {problem}")
    return out


def _property_problems(where: str, schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return [f"{where}: schema must be an object"]
    if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
        return [f"{where}: enum must be a non-empty list"]
    if "$ref" in schema:  # e.g. {"$ref": "#/$defs/FlightInfo"}, as pydantic-made schemas (tau2 airline) use
        return (
            []
            if isinstance(schema["$ref"], str) and schema["$ref"].startswith("#/")
            else [f"{where}: $ref must be a local '#/...' reference"]
        )
    if "anyOf" in schema or "oneOf" in schema:
        return [p for s in schema.get("anyOf", schema.get("oneOf")) or [] for p in _property_problems(where, s)]
    types = schema.get("type")
    if types is None:
        return [] if "enum" in schema else [f"{where}: missing 'type'"]
    for t in types if isinstance(types, list) else [types]:
        if t not in _JSON_TYPES:
            return [f"{where}: unknown type {t!r} (use one of {sorted(_JSON_TYPES)})"]
    if types == "array" and "items" in schema:
        return _property_problems(f"{where} items", schema["items"])
    if types == "object" and isinstance(schema.get("properties"), dict):
        return [p for k, s in schema["properties"].items() for p in _property_problems(f"{where}.{k}", s)]
    return []


def _signature(tool: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    params = tool["function"].get("parameters") or {}
    props = params.get("properties") or {}
    types = {k: _type_of(v) for k, v in props.items()}
    return types, set(params.get("required") or [])


def _type_of(schema: dict[str, Any]) -> Any:
    t = schema.get("type")
    if isinstance(t, list):
        return sorted(t)
    if t == "array" and isinstance(schema.get("items"), dict):
        return ["array", _type_of(schema["items"])]
    return t


def fidelity_problems(tools: list[dict[str, Any]], target_tools: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(shared tool names, mismatches) between the env's tools and the target's tools."""
    target = {t["function"]["name"]: t for t in target_tools}
    shared: list[str] = []
    problems: list[str] = []
    for tool in tools:
        name = tool["function"]["name"]
        if name not in target:
            continue
        shared.append(name)
        (mine, my_req), (theirs, their_req) = _signature(tool), _signature(target[name])
        if set(mine) != set(theirs):
            problems.append(f"tool '{name}': parameters {sorted(mine)} != target's {sorted(theirs)}")
            continue
        for key in sorted(mine):
            if mine[key] != theirs[key]:
                problems.append(f"tool '{name}': parameter '{key}' has type {mine[key]!r}, target has {theirs[key]!r}")
        if my_req != their_req:
            problems.append(f"tool '{name}': required {sorted(my_req)} != target's {sorted(their_req)}")
    return shared, problems


def result_format(content: str | None) -> str:
    """Classify a tool result: 'object', 'array', 'scalar' (other JSON) or 'text'."""
    try:
        value = json.loads(content or "")
    except (json.JSONDecodeError, TypeError):
        return "text"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "scalar"


def random_value(schema: dict[str, Any], rng: random.Random, words: list[str]) -> Any:
    """A random value valid for a JSON property schema; strings come from `words` half the time."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        return random_value(rng.choice(schema.get("anyOf") or schema["oneOf"]), rng, words)
    t = schema.get("type", "string")
    if isinstance(t, list):
        t = rng.choice([x for x in t if x != "null"] or ["null"])
    if t == "integer":
        return rng.randint(0, 100)
    if t == "number":
        return round(rng.uniform(0, 100), 2)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    if t == "array":
        return [random_value(schema.get("items", {}), rng, words) for _ in range(rng.randint(0, 2))]
    if t == "object":
        return random_args(schema, rng, words)
    if words and rng.random() < 0.5:
        return rng.choice(words)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(3, 8)))


def random_args(params: dict[str, Any], rng: random.Random, words: list[str]) -> dict[str, Any]:
    """Random arguments for a parameters schema: every required key, each optional one half the time."""
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    return {k: random_value(s, rng, words) for k, s in props.items() if k in required or rng.random() < 0.5}
