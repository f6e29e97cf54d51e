"""`SyntheticEnv.called` / `calls_to` match any tool argument, one called `name` (or `tool`) included: the tool's
own name is positional-only."""

from __future__ import annotations

import pytest

from gapforge.envs.sdk import EnvDefinitionError, SyntheticEnv, tool


class Renamer(SyntheticEnv):
    capability = "renaming"
    description = "Rename the record as asked."
    target = "shop"
    policy = "Rename records with rename()."

    def generate(self, seed: int) -> dict:
        return {"opening": "Rename r1 to Ada.", "db": {"r1": "old"}}

    @tool
    def rename(self, record: str, name: str, tool: str = "") -> dict:
        """Give a record a new name.

        Args:
            record: The record id.
            name: The new name.
            tool: Which editor did it (free text).
        """
        self.db[record] = name
        return {"record": record, "name": name}

    def reward(self) -> dict[str, float]:
        return {"renamed": float(self.called("rename", record="r1", name="Ada"))}

    def solution(self, seed: int) -> list[dict]:
        return [{"tool": "rename", "arguments": {"record": "r1", "name": "Ada"}}]


def _call(env: SyntheticEnv, args: dict) -> None:
    env.step({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "rename", "arguments": args}]})


def test_an_argument_called_name_is_matched() -> None:
    env = Renamer()
    env.reset(0)
    _call(env, {"record": "r1", "name": "Bob", "tool": "vi"})
    assert not env.called("rename", name="Ada") and env.score()["reward"] == 0.0
    _call(env, {"record": "r1", "name": "Ada"})
    assert env.called("rename", name="Ada") and env.called("rename", record="r1", name="Ada")
    assert [c["arguments"]["name"] for c in env.calls_to("rename", name="Bob", tool="vi")] == ["Bob"]
    assert env.called("rename") and not env.called("delete") and env.score()["reward"] == 1.0


def test_the_tool_name_is_positional_only() -> None:
    env = Renamer()
    env.reset(0)
    with pytest.raises(TypeError):
        env.called(tool="rename")  # type: ignore[call-arg]
    assert env.calls_to("rename") == []


@pytest.mark.parametrize("helper", ["calls_to", "called"])
def test_a_tool_may_not_take_a_helpers_name(helper: str) -> None:
    def clash(self, x: str) -> str:
        """Shadows a helper."""
        return x

    clash.__name__ = helper  # as `@tool def calls_to(self, x)` would be
    env = type("Clash", (Renamer,), {helper: tool(clash)})
    with pytest.raises(EnvDefinitionError, match="clashes with the SDK's runtime API"):
        env.check_definition()
