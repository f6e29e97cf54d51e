"""The LOCAL routed endpoint (transformers + PEFT) answering the official `openai` client with
tool calls: the tiny model taught to emit a valid and a broken tool call (tests/serving/
tool_call_model.py, shared fixture `taught_model_dir`) serves as the base under a LoRA adapter
the conversation is routed to. A valid call comes back in OpenAI format; a broken one as plain
text with the parse error named (serving/routed_server.py's documented contract)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from tool_call_model import BROKEN_REQUEST, GOOD_REQUEST, TEACH, OrderDesk

from gapforge.agents.router import RouteDecision
from gapforge.serving.multi_adapter import MultiAdapterModel
from gapforge.serving.routed_server import ROUTED_MODEL, RoutedApp
from tests.fakes.routed_server import RoutedServer

ADAPTER = "order_lookup"


def _identity_adapter(model_dir: Path, out: Path) -> Path:
    """A LoRA adapter with PEFT's default init (B = 0): the adapted model answers exactly like the taught base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(taught_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    adapter = _identity_adapter(taught_model_dir, tmp_path_factory.mktemp("identity-adapter"))
    # template_kwargs={}: the prompt rendered exactly as LocalPolicy rendered it when the model was taught
    backend = MultiAdapterModel(
        taught_model_dir, {ADAPTER: adapter}, max_new_tokens=40, name="taught-base", template_kwargs={}
    )
    routed_to: list[str] = []

    def router(
        messages,
    ):  # a fixed decision: this test is about the answer's format, tests/serving/test_routed_server.py about routing
        routed_to.append(messages[-1]["content"])
        return RouteDecision("A", "order_lookup", ADAPTER, 3.0, False, {"A": -0.1, "B": -3.1})

    with RoutedServer(RoutedApp(backend, router)) as s:
        yield s, routed_to


def _ask(server: RoutedServer, task: int, **kwargs):
    env = OrderDesk()
    messages = [m.to_openai() for m in env.reset(task)]
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=ROUTED_MODEL, messages=messages, tools=env.tools(), temperature=0, **kwargs
    )


def test_a_valid_tool_call_comes_back_in_openai_format(server) -> None:
    s, routed_to = server
    raw = _ask(s, GOOD_REQUEST, max_tokens=100_000)  # far above the config: capped at its 40, not a context error
    r = raw.parse()
    assert raw.headers["X-Gapforge-Adapter"] == ADAPTER and r.model_extra["gapforge"]["decision"]["label"] == "A"
    assert routed_to[-1] == f"Where is my order #W{GOOD_REQUEST}?"
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "get_order"
    assert json.loads(call.function.arguments) == {
        "order_id": "#W1234567"
    }  # arguments as a JSON string, as OpenAI sends them
    assert "malformed_tool_call" not in r.model_extra["gapforge"]
    # the call goes back into the conversation with its result, as an agent loop would send it
    follow = [*(m.to_openai() for m in OrderDesk().reset(GOOD_REQUEST)), choice.message.model_dump(exclude_none=True)]
    follow.append({"role": "tool", "tool_call_id": call.id, "content": '{"status": "shipped"}'})
    client = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0)
    again = client.chat.completions.create(
        model=ROUTED_MODEL, messages=follow, tools=OrderDesk().tools(), temperature=0, max_tokens=4
    )
    assert again.model_extra["gapforge"]["cached"] is True and again.choices[0].message.role == "assistant"


def test_a_broken_tool_call_comes_back_as_plain_text_with_the_error_named(server) -> None:
    s, _ = server
    raw = _ask(s, BROKEN_REQUEST)
    assert raw.http_response.status_code == 200
    r = raw.parse()
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content == TEACH[BROKEN_REQUEST].removesuffix("<|im_end|>")  # the model's raw text, untouched
    assert "not valid JSON" in r.model_extra["gapforge"]["malformed_tool_call"]
    assert r.model_extra["gapforge"]["adapter"] == ADAPTER
