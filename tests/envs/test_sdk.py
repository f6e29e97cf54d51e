"""The synthetic-env SDK (envs/sdk.py): schemas from typed tools, definition checks, the runtime contract."""

from __future__ import annotations

import enum
import json
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Literal

import pytest

from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import Message
from gapforge.envs.sdk import (
    EnvDefinitionError,
    ProtocolError,
    SyntheticEnv,
    ToolError,
    action_to_message,
    find_env_class,
    tool,
)
from gapforge.envs.synthetic import InProcessSyntheticEnv, load_env_class

SDK_PATH = Path(__file__).resolve().parents[2] / "envs" / "sdk.py"
MESSAGE_KEYS = set(Message(role="user").model_dump())  # the dump shape (an empty `reasoning` is left out)


class Size(enum.Enum):
    SMALL = "S"
    LARGE = "L"


class Counter(SyntheticEnv):
    capability = "counting"
    description = "Add numbers until the counter reaches the goal."
    target = "shop"
    policy = "Reach the goal with add()."
    weights = {"reached": 3.0}
    max_turns = 5

    def generate(self, seed: int) -> dict:
        goal = self.rng.randint(2, 6)
        return {"opening": f"Please reach {goal}.", "db": {"n": 0}, "goal": goal}

    @tool
    def add(self, k: int, note: str | None = None) -> dict:
        """Add k to the counter.

        Args:
            k: How much to add,
                at most 5.
        """
        self.db["n"] += k  # mutated before failing: must be rolled back
        if k > 5:
            raise ToolError("k is at most 5")
        return {"n": self.db["n"]}

    @tool(name="crash")
    def crash_tool(self) -> str:
        """Always fails with an env bug."""
        self.db["n"] = -100
        raise KeyError("boom")

    def user_reply(self, text: str) -> str | None:
        return None if "bye" in text else "Go on."

    def reward(self) -> dict[str, float]:
        goal = self.scenario["goal"]
        return {"called": float(self.called("add")), "reached": min(1.0, self.db["n"] / goal)}

    def solution(self, seed: int) -> list[dict]:
        goal = self.scenario["goal"]
        return [{"tool": "add", "arguments": {"k": goal - 1}}, {"tool": "add", "arguments": {"k": 1}}, {"say": "bye"}]


def _call(name: str, arguments: object, call_id: str = "c1") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
        "tool_call_id": None,
        "name": None,
    }


def test_schema_from_typed_parameters_and_docstring() -> None:
    class Typed(Counter):
        @tool
        def many(
            self,
            s: str,
            i: int,
            f: float,
            b: bool,
            tags: list[str],
            meta: dict,
            mode: Literal["a", "b"],
            size: Size,
            opt: int | None = None,
            dflt: str = "x",
        ) -> str:
            """Take every supported type.

            Longer explanation.

            Args:
                s: a string
                i (int): an integer
            """
            return "ok"

    schema = next(t for t in Typed().tools() if t["function"]["name"] == "many")["function"]
    assert schema["description"] == "Take every supported type. Longer explanation."
    props = schema["parameters"]["properties"]
    assert props["s"] == {"type": "string", "description": "a string"}
    assert props["i"] == {"type": "integer", "description": "an integer"}
    assert props["f"] == {"type": "number"} and props["b"] == {"type": "boolean"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}} and props["meta"] == {"type": "object"}
    assert props["mode"] == {"type": "string", "enum": ["a", "b"]} and props["size"] == {
        "type": "string",
        "enum": ["S", "L"],
    }
    assert props["opt"] == {"type": "integer"}
    assert schema["parameters"]["required"] == ["s", "i", "f", "b", "tags", "meta", "mode", "size"]
    assert schema["parameters"]["additionalProperties"] is False
    add = Counter().tools()[0]["function"]
    assert add["parameters"]["properties"]["k"]["description"] == "How much to add, at most 5."
    assert [t["function"]["name"] for t in Counter().tools()] == ["add", "crash"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("def t(self, x) -> str:\n    '''Doc.'''\n    return ''", "needs a type annotation"),
        ("def t(self, x: set) -> str:\n    '''Doc.'''\n    return ''", "unsupported type"),
        ("def t(self, x: int) -> str:\n    return ''", "needs a docstring"),
        ("def t(self, *xs: int) -> str:\n    '''Doc.'''\n    return ''", "*args/**kwargs"),
        ("def step(self, x: int) -> str:\n    '''Doc.'''\n    return ''", "clashes with the SDK"),
    ],
)
def test_bad_tool_definitions_name_the_problem(body: str, fragment: str) -> None:
    ns: dict = {"tool": tool}
    exec(f"@tool\n{body}", ns)
    fn = next(v for k, v in ns.items() if callable(v) and k != "tool")
    bad = type("Bad", (Counter,), {fn.__name__: fn})
    with pytest.raises(EnvDefinitionError, match=fragment.replace("*", r"\*")):
        bad.check_definition()


def test_class_attribute_checks() -> None:
    with pytest.raises(EnvDefinitionError, match="snake_case"):
        type("B1", (Counter,), {"capability": "Not Snake"}).check_definition()
    with pytest.raises(EnvDefinitionError, match="target"):
        type("B2", (Counter,), {"target": ""}).check_definition()
    with pytest.raises(EnvDefinitionError, match="no tools"):
        type(
            "B3",
            (SyntheticEnv,),
            {
                "capability": "x",
                "description": "d",
                "target": "shop",
                "policy": "p",
                "generate": Counter.generate,
                "reward": Counter.reward,
                "solution": Counter.__dict__["solution"],
            },
        ).check_definition()
    with pytest.raises(EnvDefinitionError, match="implement reward"):
        type(
            "B4",
            (SyntheticEnv,),
            {
                "capability": "x",
                "description": "d",
                "target": "shop",
                "policy": "p",
                "generate": Counter.generate,
                "add": Counter.add,
            },
        ).check_definition()


def test_find_env_class_wants_exactly_one() -> None:
    mod = types.ModuleType("m_one")
    mod.SyntheticEnv, mod.Counter, mod.other = SyntheticEnv, Counter, 3
    assert find_env_class(mod) is Counter
    with pytest.raises(EnvDefinitionError, match="no subclass"):
        find_env_class(types.ModuleType("m_none"))
    mod.Again = type("Again", (Counter,), {})
    with pytest.raises(EnvDefinitionError, match="several SyntheticEnv subclasses \\(Again, Counter\\)"):
        find_env_class(mod)


def test_reset_step_score_contract() -> None:
    env = Counter()
    opening = env.reset(3)
    assert [m["role"] for m in opening] == ["system", "user"] and all(set(m) == MESSAGE_KEYS for m in opening)
    assert opening == Counter().reset(3) and len({Counter().reset(s)[1]["content"] for s in range(10)}) > 1
    out = env.step(_call("add", {"k": 2}))
    assert set(out) == {"messages", "done", "info"} and out["done"] is False
    [msg] = out["messages"]
    assert set(msg) == MESSAGE_KEYS and Message.model_validate(msg).role == "tool"
    assert (msg["tool_call_id"], msg["name"], json.loads(msg["content"])) == ("c1", "add", {"n": 2})
    reply = env.step({"role": "assistant", "content": "more?", "tool_calls": []})
    assert reply["messages"][0]["role"] == "user" and reply["messages"][0]["content"] == "Go on."
    assert env.step(action_to_message({"say": "bye"}, "x")) == {
        "messages": [],
        "done": True,
        "info": {"turn": 3, "tool_errors": [], "reason": "user_ended"},
    }
    score = env.score()
    goal = env.scenario["goal"]
    assert score["components"] == {"called": 1.0, "reached": min(1.0, 2 / goal)}
    assert score["reward"] == pytest.approx((1.0 + 3.0 * min(1.0, 2 / goal)) / 4.0)
    assert score["success"] is (score["reward"] >= 0.999)
    assert env.step(_call("add", {"k": 1}))["done"] is True and env.db["n"] == 2  # over: no more effects


def test_tool_failures_become_error_messages_and_roll_back() -> None:
    env = Counter()
    env.reset(1)
    calls = [
        {"id": "a", "name": "add", "arguments": {"k": 9}},
        {"id": "b", "name": "add", "arguments": {"k": "2"}},
        {"id": "c", "name": "add", "arguments": {"k": 1, "extra": True}},
        {"id": "d", "name": "nope", "arguments": {}},
        {"id": "e", "name": "crash", "arguments": {}},
        {"id": "f", "type": "function", "function": {"name": "add", "arguments": "{not json"}},
        {"id": "g", "type": "function", "function": {"name": "add", "arguments": '{"k": 3}'}},
    ]
    out = env.step({"role": "assistant", "content": None, "tool_calls": calls})
    contents = [m["content"] for m in out["messages"]]
    assert [m["tool_call_id"] for m in out["messages"]] == list("abcdefg")
    assert contents[0] == "Error: k is at most 5"
    assert contents[1].startswith("Error: argument 'k' must be integer")
    assert "unknown argument(s) ['extra']" in contents[2] and "unknown tool 'nope'" in contents[3]
    assert contents[4] == "Error: KeyError: 'boom'" and "not valid JSON" in contents[5]
    assert json.loads(contents[6]) == {"n": 3} and env.db["n"] == 3  # failed calls left no trace
    kinds = [e["kind"] for e in out["info"]["tool_errors"]]
    assert kinds == ["tool_error", "bad_arguments", "bad_arguments", "unknown_tool", "exception", "bad_arguments"]
    assert [c["ok"] for c in env.calls] == [False] * 6 + [True]


def test_max_turns_and_protocol_errors() -> None:
    env = Counter()
    with pytest.raises(ProtocolError):
        env.step(_call("add", {"k": 1}))
    with pytest.raises(ProtocolError):
        env.reset("3")  # type: ignore[arg-type]
    env.reset(0)
    with pytest.raises(ProtocolError):
        env.step({"role": "user", "content": "hi"})
    results = [env.step(_call("add", {"k": 0})) for _ in range(Counter.max_turns)]
    assert [r["done"] for r in results] == [False] * 4 + [True] and results[-1]["info"]["reason"] == "max_turns"


def test_bad_reward_and_scenario_are_definition_errors() -> None:
    env = type("R", (Counter,), {"reward": lambda self: {"x": 1.5}})()
    env.reset(0)
    with pytest.raises(EnvDefinitionError, match="component 'x'"):
        env.score()
    with pytest.raises(EnvDefinitionError, match="opening"):
        type("G", (Counter,), {"generate": lambda self, seed: {"db": {}}})().reset(0)
    with pytest.raises(EnvDefinitionError, match="JSON-serializable"):
        type("J", (Counter,), {"generate": lambda self, seed: {"opening": "x", "db": {1, 2}}})().reset(0)


def test_solution_runs_on_a_fresh_episode_for_its_seed() -> None:
    env = Counter()
    env.reset(1)
    env.step(_call("add", {"k": 1}))
    goal5 = Counter().scenario_for(5)["goal"]
    assert env.solution(5)[0] == {"tool": "add", "arguments": {"k": goal5 - 1}}
    assert env.seed == 1 and env.db["n"] == 1  # the running episode is untouched
    for seed in range(10):
        env.reset(seed)
        for i, action in enumerate(env.solution(seed)):
            if env.step(action_to_message(action, f"s{i}"))["done"]:
                break
        assert env.score()["success"] is True
    broken = type("S", (Counter,), {"solution": lambda self, seed: [{"tool": "add", "args": {}}]})()
    with pytest.raises(EnvDefinitionError, match="action 0"):
        broken.solution(0)


def test_action_to_message() -> None:
    msg = action_to_message({"tool": "add", "arguments": {"k": 1}}, "id7")
    assert Message.model_validate(msg).tool_calls[0].model_dump() == {"id": "id7", "name": "add", "arguments": {"k": 1}}
    assert Message.model_validate(action_to_message({"say": "hi"}, "x")).content == "hi"
    with pytest.raises(ProtocolError):
        action_to_message({"do": 1}, "x")


def test_in_process_env_loads_files_and_reports_bad_ones(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(
        textwrap.dedent('''
        from __future__ import annotations
        from envs.sdk import SyntheticEnv, tool

        class Echo(SyntheticEnv):
            capability = "echo"
            description = "Echo."
            target = "shop"
            policy = "Echo the word."

            def generate(self, seed):
                return {"opening": "word" + str(self.rng.randint(0, 9))}

            @tool
            def echo(self, text: str) -> str:
                """Echo text."""
                return text

            def reward(self):
                return {"echoed": float(self.called("echo", text=self.scenario["opening"]))}

            def solution(self, seed):
                return [{"tool": "echo", "arguments": {"text": self.scenario["opening"]}}]
    ''')
    )
    env = InProcessSyntheticEnv(good)
    assert env.name == "synthetic:echo" and load_env_class(good).__name__ == "Echo"
    first = env.reset(4)[1].content
    [action] = env.solution(4)
    env.step(Message.model_validate(action_to_message(action, "c")))
    assert first and env.score().success is True
    broken = tmp_path / "broken.py"
    broken.write_text("from envs.sdk import SyntheticEnv\nclass A(SyntheticEnv):\n    capability = 'Bad Name'\n")
    with pytest.raises(EnvError, match="snake_case"):
        InProcessSyntheticEnv(broken)
    with pytest.raises(EnvError, match="not found"):
        InProcessSyntheticEnv(tmp_path / "missing.py")


def test_sdk_is_stdlib_only(tmp_path: Path) -> None:
    """Run a whole episode with only envs/sdk.py on the path, site-packages disabled (-I -S)."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    shutil.copy(SDK_PATH, tmp_path / "envs" / "sdk.py")
    script = textwrap.dedent('''
        import sys
        sys.path[:] = [p for p in sys.path if "site-packages" not in p] + [sys.argv[1]]
        from envs.sdk import SyntheticEnv, tool, action_to_message, find_env_class
        import types
        class Echo(SyntheticEnv):
            capability = "echo"; description = "d"; target = "shop"; policy = "p"
            def generate(self, seed): return {"opening": "w%d" % self.rng.randint(0, 9)}
            @tool
            def echo(self, text: str, n: int = 1) -> dict:
                """Echo."""
                return {"text": text * n}
            def reward(self): return {"ok": float(self.called("echo"))}
            def solution(self, seed): return [{"tool": "echo", "arguments": {"text": "x"}}]
        mod = types.ModuleType("m"); mod.Echo = Echo
        env = find_env_class(mod)()
        env.reset(1)
        env.step(action_to_message(env.solution(1)[0], "c"))
        assert env.score()["success"]
        third_party = sorted(m for m in sys.modules if m.split(".")[0] in {"pydantic", "envs.protocol", "gapforge"})
        print("OK", third_party)
    ''')
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK []"
