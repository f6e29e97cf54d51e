"""structured_call: pydantic answers, one re-ask with the parse error, a clear error after two bad ones."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict

from gapforge.agents.config import EndpointConfig
from gapforge.agents.errors import StructuredOutputError
from gapforge.agents.llm import ScriptedChatModel, astructured_call, make_chat_model, prompt_config, structured_call
from tests.fakes.fake_openai import FakeOpenAIServer

ASK = [SystemMessage("You name capabilities."), HumanMessage("Name one.")]


class Capability(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    definition: str
    examples: list[int]


GOOD = {"name": "precondition_verification", "definition": "Checks before acting.", "examples": [3, 7]}


class Recorder:
    """A rule that records the messages of every call and answers from a list."""

    def __init__(self, answers: list[dict]) -> None:
        self.answers = answers
        self.calls: list[list] = []

    def __call__(self, messages, tools):
        self.calls.append(list(messages))
        return self.answers[len(self.calls) - 1]


def test_with_structured_output_returns_the_model() -> None:
    model = ScriptedChatModel.from_dict({"discover": [{"structured": GOOD}]})
    out = model.with_structured_output(Capability).invoke(ASK, prompt_config("discover"))
    assert out == Capability(**GOOD)


def test_valid_first_answer_is_not_reasked() -> None:
    model = ScriptedChatModel.from_dict({"discover": [{"structured": GOOD}, {"structured": GOOD}]})
    assert structured_call(model, ASK, Capability, prompt_name="discover") == Capability(**GOOD)
    assert model.used("discover") == 1


@pytest.mark.parametrize(
    ("bad", "error_part"),
    [
        ('{"name": "x", "definition": ', "not valid JSON"),
        ({"name": "x", "definition": "d", "examples": ["many"]}, "field 'examples.0'"),
        ({**GOOD, "extra": 1}, "field 'extra': Extra inputs are not permitted"),
    ],
)
def test_malformed_then_valid_is_reasked_once_with_the_error(bad, error_part: str) -> None:
    rule = Recorder([{"structured": bad}, {"structured": GOOD}])
    model = ScriptedChatModel.from_dict({"discover": rule})
    assert structured_call(model, ASK, Capability, prompt_name="discover") == Capability(**GOOD)
    assert len(rule.calls) == 2
    second = rule.calls[1]
    assert second[: len(ASK)] == ASK
    assert error_part in second[-1].content  # the re-ask carries the parse error
    assert "Capability" in second[-1].content
    assert second[-2].type == "ai"  # ... after what the model said


def test_plain_text_instead_of_structure_is_reasked() -> None:
    model = ScriptedChatModel.from_dict({"discover": ["I think it is precondition checking.", {"structured": GOOD}]})
    assert structured_call(model, ASK, Capability, prompt_name="discover").name == GOOD["name"]
    assert model.used("discover") == 2


def test_two_malformed_answers_raise_a_clear_error() -> None:
    model = ScriptedChatModel.from_dict(
        {"discover": [{"structured": "not json"}, {"structured": {"name": "x"}}, {"structured": GOOD}]}
    )
    expected = (
        r"malformed Capability output twice \(first: .*not valid JSON.*then: .*field 'definition': Field required"
    )
    with pytest.raises(StructuredOutputError, match=expected) as e:
        structured_call(model, ASK, Capability, prompt_name="discover")
    assert "\n" not in str(e.value)
    assert model.used("discover") == 2  # asked exactly twice


async def test_async_variant_reasks_too() -> None:
    model = ScriptedChatModel.from_dict({"discover": [{"structured": "{"}, {"structured": GOOD}]})
    assert await astructured_call(model, ASK, Capability, prompt_name="discover") == Capability(**GOOD)


def test_schema_must_forbid_extra_fields() -> None:
    class Loose(BaseModel):
        name: str

    with pytest.raises(TypeError, match="extra='forbid'"):
        structured_call(
            ScriptedChatModel.from_dict({"d": [{"structured": {"name": "x"}}]}), ASK, Loose, prompt_name="d"
        )


def test_reask_over_a_real_chat_openai_client() -> None:
    """ChatOpenAI (json_schema response format) against a local server: broken JSON first, then valid."""
    answers = ['{"name": "x", "definition": "d", "examples": [1,', json.dumps(GOOD)]

    def responder(req: dict) -> dict:
        return {"role": "assistant", "content": answers[len(srv.requests) - 1]}

    with FakeOpenAIServer(responder) as srv:
        model = make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=0))
        out = structured_call(model, ASK, Capability)
        assert out == Capability(**GOOD)
        assert srv.request_count == 2
        assert srv.requests[0]["response_format"]["type"] == "json_schema"
        reask = srv.requests[1]["messages"][-1]
        assert reask["role"] == "user" and "could not be used" in reask["content"]
        assert srv.requests[1]["messages"][-2] == {"role": "assistant", "content": answers[0]}
