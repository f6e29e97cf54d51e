"""ScriptedChatModel: recorded answers by prompt name, tool calls, rules, files, config wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from gapforge.agents.errors import ModelError
from gapforge.agents.llm import ScriptedChatModel, chat_model_from_config, prompt_config
from gapforge.config import LLMConfig, PolicyConfig
from gapforge.envs.protocol import tool_schema

LOOKUP = tool_schema("lookup", "Look a customer up.", {"email": {"type": "string"}})


def test_text_answers_are_keyed_by_prompt_name_and_consumed_in_order() -> None:
    model = ScriptedChatModel.from_dict({"discover": ["first", "second"], "label": ["a label"]})
    assert model.invoke("x", prompt_config("discover")).content == "first"
    assert model.invoke("x", prompt_config("label")).content == "a label"
    assert model.invoke("x", prompt_config("discover")).content == "second"
    assert model.used("discover") == 2


def test_running_out_names_the_prompt() -> None:
    model = ScriptedChatModel.from_dict({"discover": ["only"]}, source="answers.yaml")
    model.invoke("x", prompt_config("discover"))
    with pytest.raises(ModelError, match=r"ran out of answers for prompt 'discover' after 1; add more to answers.yaml"):
        model.invoke("x", prompt_config("discover"))


def test_unknown_or_missing_prompt_name_is_a_model_error() -> None:
    model = ScriptedChatModel.from_dict({"discover": ["a"], "label": ["b"]})
    with pytest.raises(ModelError, match=r"no answers for prompt 'synthesize' \(known: discover, label\)"):
        model.invoke("x", prompt_config("synthesize"))
    with pytest.raises(ModelError, match="without a prompt name"):
        model.invoke("x")
    fallback = ScriptedChatModel.from_dict({"label": ["b"]}, default_prompt="label")
    assert fallback.invoke("x").content == "b"


def test_bind_tools_returns_tool_calls_and_the_rule_sees_the_tools() -> None:
    seen: dict[str, list] = {}

    def rule(messages, tools):
        seen["tools"] = [t["function"]["name"] for t in tools]
        seen["last"] = messages[-1]
        return {"content": "checking", "tool_calls": [{"name": "lookup", "arguments": {"email": "a@b.c"}}]}

    model = ScriptedChatModel.from_dict(
        {"policy": [{"tool_calls": [{"name": "lookup", "arguments": {"email": "x@y.z"}, "id": "c1"}]}, rule]}
    )
    bound = model.bind_tools([LOOKUP])
    first = bound.invoke([HumanMessage("find x")], prompt_config("policy"))
    assert first.tool_calls == [{"name": "lookup", "args": {"email": "x@y.z"}, "id": "c1", "type": "tool_call"}]
    second = bound.invoke(
        [HumanMessage("find"), first, ToolMessage("none", tool_call_id="c1")], prompt_config("policy")
    )
    assert second.content == "checking"
    assert second.tool_calls[0]["args"] == {"email": "a@b.c"}
    assert second.tool_calls[0]["id"]  # generated when the script gives none
    assert seen["tools"] == ["lookup"]
    assert isinstance(seen["last"], ToolMessage)


def test_raw_broken_arguments_become_invalid_tool_calls() -> None:
    model = ScriptedChatModel.from_dict({"policy": [{"tool_calls": [{"name": "lookup", "arguments": "{email: "}]}]})
    msg = model.bind_tools([LOOKUP]).invoke("x", prompt_config("policy"))
    assert msg.tool_calls == []
    assert msg.invalid_tool_calls[0]["name"] == "lookup"
    assert "not valid JSON" in msg.invalid_tool_calls[0]["error"]


def test_repeat_and_callable_entries_never_run_out() -> None:
    calls = []
    model = ScriptedChatModel.from_dict(
        {"user": {"repeat": "ok"}, "judge": lambda msgs, tools: calls.append(1) or f"seen {len(msgs)}"}
    )
    assert [model.invoke("x", prompt_config("user")).content for _ in range(5)] == ["ok"] * 5
    assert model.invoke([HumanMessage("a"), HumanMessage("b")], prompt_config("judge")).content == "seen 2"
    assert len(calls) == 1


async def test_async_invoke_uses_the_same_script() -> None:
    model = ScriptedChatModel.from_dict({"p": ["one", "two"]})
    assert (await model.ainvoke("x", prompt_config("p"))).content == "one"
    assert model.invoke("x", prompt_config("p")).content == "two"


def test_load_from_yaml_and_json_files(tmp_path: Path) -> None:
    y = tmp_path / "answers.yaml"
    y.write_text(
        "policy:\n  - content: hello\n  - tool_calls:\n      - name: lookup\n        arguments: {email: q@r.s}\n"
    )
    model = ScriptedChatModel.from_file(y)
    assert model.invoke("x", prompt_config("policy")).content == "hello"
    assert model.bind_tools([LOOKUP]).invoke("x", prompt_config("policy")).tool_calls[0]["args"] == {"email": "q@r.s"}
    j = tmp_path / "answers.json"
    j.write_text(json.dumps({"discover": [{"structured": {"a": 1}}]}))
    assert json.loads(ScriptedChatModel.from_file(j).invoke("x", prompt_config("discover")).content) == {"a": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policy: [\n", "not valid YAML/JSON"),
        ("- just a list\n", "must map prompt names to answers"),
        ("policy:\n  - contnet: typo\n", "field 'contnet': Extra inputs are not permitted"),
        ("policy: 3\n", "expected a list, {repeat: answer} or a rule"),
    ],
)
def test_bad_answer_files_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ModelError, match=message.replace("{", r"\{").replace("}", r"\}")) as e:
        ScriptedChatModel.from_file(p)
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match="not found"):
        ScriptedChatModel.from_file(tmp_path / "missing.yaml")


def test_chat_model_from_config(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="llm.kind=scripted needs llm.scripted_path"):
        chat_model_from_config(LLMConfig(kind="scripted"))
    p = tmp_path / "a.yaml"
    p.write_text("policy: [hi]\n")
    model = chat_model_from_config(PolicyConfig(kind="scripted", scripted_path=str(p)), section="policy")
    assert model.invoke("x", prompt_config("policy")).content == "hi"
    with pytest.raises(ModelError, match="no chat endpoint configured: set OPENAI_API_KEY"):
        chat_model_from_config(LLMConfig(kind="openai"))
    local = chat_model_from_config(
        LLMConfig.model_validate({"kind": "openai", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    )
    assert local.openai_api_key.get_secret_value() == "not-needed"
    assert local.max_retries == 0 and local.retry_attempts == 5
