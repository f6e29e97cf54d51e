"""Tool schemas are JSON Schema: a user's env whose tool has a property that is not a schema, or a `required` name
that is no property, is refused when it loads (one line naming the tool, exit 2); the synthetic envs' `loads` check
applies the same meta-schema; a valid schema passes both."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import tool_schema
from gapforge.envs.registry import make_env
from gapforge.envs.target_check import parameters_problem
from gapforge.sandbox.checks.schemas import schema_problems

ENV = """
class Refunds:
    def tools(self):
        return [{{"type": "function", "function": {{"name": "lookup", "parameters": {{"type": "object", "properties": {{}}}}}}}},
                {{"type": "function", "function": {{"name": "refund", "description": "Refund an order.", "parameters": {params}}}}}]
    def reset(self, task): return []
    def step(self, message): return [], False
    def score(self): return 0.0
    def close(self): pass
    def task_ids(self): return ["t1"]
    def task_family(self, task_id): return "refunds"
"""
NOT_A_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": 5}}
NO_SUCH_PROPERTY = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id", "reason"],
}
VALID = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^o-[0-9]+$"},
        "amount": {"type": "number", "minimum": 0},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
    },
    "required": ["order_id"],
    "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
    "additionalProperties": False,
}


def _env_file(tmp_path: Path, params: dict) -> str:
    path = tmp_path / "refunds_env.py"
    path.write_text(ENV.format(params=repr(params)))
    return f"{path}:Refunds"


@pytest.mark.parametrize(
    ("params", "said"),
    [
        (
            NOT_A_SCHEMA,
            "tool 'refund' parameters: properties.amount: 5 is not of type 'object', 'boolean': fix its JSON Schema",
        ),
        (
            NO_SUCH_PROPERTY,
            "tool 'refund' parameters: required names 'reason', which is not a property: fix its JSON Schema",
        ),
        (
            {**NOT_A_SCHEMA, "properties": {"amount": {"type": "number", "minimum": "zero"}}},
            "tool 'refund' parameters: properties.amount.minimum: 'zero' is not of type 'number'",
        ),
        (
            {
                "type": "object",
                "properties": {"line": {"type": "object", "properties": {}, "required": ["sku", "qty"]}},
            },
            "tool 'refund' parameters: properties.line.required names 'sku', 'qty', which are not properties",
        ),
    ],
)
def test_a_users_tool_with_an_invalid_schema_is_refused_naming_the_tool(
    tmp_path: Path, params: dict, said: str
) -> None:
    spec = _env_file(tmp_path, params)
    with pytest.raises(EnvError) as err:
        make_env(spec)
    assert said in str(err.value) and "\n" not in str(err.value), str(err.value)
    result = CliRunner().invoke(app, ["rollouts", "tasks", spec, "--set", f"workspace={tmp_path / 'ws'}"])
    assert (
        result.exit_code == 2 and "tool 'refund' parameters: " in result.output and "Traceback" not in result.output
    ), result.output


def test_a_valid_schema_is_accepted(tmp_path: Path) -> None:
    assert parameters_problem(VALID) is None
    env = make_env(_env_file(tmp_path, VALID))
    assert [t["function"]["name"] for t in env.tools()] == ["lookup", "refund"]
    assert schema_problems([tool_schema("refund", "r", VALID["properties"], ["order_id"])]) == []


def test_the_synthetic_envs_check_applies_the_meta_schema() -> None:
    bad_minimum = tool_schema("refund", "r", {"amount": {"type": "number", "minimum": "zero"}})
    assert schema_problems([bad_minimum]) == [
        "tool 'refund': parameters: properties.amount.minimum: 'zero' is not of type 'number'"
    ]
    bad_pattern = tool_schema("refund", "r", {"order_id": {"type": "string", "pattern": "(unclosed"}})
    assert schema_problems([bad_pattern]) == [
        "tool 'refund': parameters: properties.order_id.pattern: '(unclosed' is not a 'regex'"
    ]
    not_a_schema = tool_schema("refund", "r", {"amount": 5})  # the structural check names it first, once
    assert schema_problems([not_a_schema]) == ["tool 'refund': parameter 'amount': schema must be an object"]
