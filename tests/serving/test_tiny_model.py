"""The tiny offline Qwen3 model: builds without a hub, loads with Auto*, deterministic, and its
chat template renders tools, tool calls and tool results in the Qwen3 layout."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.envs.protocol import Message, ToolCall, tool_schema
from gapforge.serving.errors import ServingError
from gapforge.serving.local import to_template_messages
from gapforge.serving.tiny_model import SPECIAL_TOKENS, TAG_TOKENS, build_tiny_model

OFFLINE_SCRIPT = """
import sys
from gapforge.serving.tiny_model import build_tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer
path = build_tiny_model(sys.argv[1], seed=0)
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
print(type(model).__name__, model.config.model_type, len(tok))
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_builds_and_loads_with_the_hub_unreachable(tmp_path: Path) -> None:
    # A fresh process with the hub switched off and every proxy pointing at a dead port:
    # any network access would fail the build or the load.
    dead = "http://127.0.0.1:9"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HTTPS_PROXY": dead,
        "HTTP_PROXY": dead,
        "HF_HOME": str(tmp_path / "hf"),
    }
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT, str(tmp_path / "m")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    cls, model_type, vocab = out.stdout.split()
    assert (cls, model_type) == ("Qwen3ForCausalLM", "qwen3")
    assert 1000 <= int(vocab) <= 4096
    assert not (tmp_path / "hf" / "hub").exists() or not any((tmp_path / "hf" / "hub").iterdir())


def test_same_seed_same_files_other_seed_other_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"):
        assert _sha(again / name) == _sha(tiny_model_dir / name), name
    assert _sha(other / "model.safetensors") != _sha(again / "model.safetensors")
    assert _sha(other / "tokenizer.json") == _sha(again / "tokenizer.json")  # tokenizer does not depend on the seed


def test_tokenizer_special_tokens(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        assert len(tok.encode(token, add_special_tokens=False)) == 1, token
    ids = tok.encode('<think>x</think><tool_call>{"name": "a"}</tool_call><|im_end|>', add_special_tokens=False)
    # control tokens vanish on decode, the tags the parser needs survive
    assert tok.decode(ids, skip_special_tokens=True) == '<think>x</think><tool_call>{"name": "a"}</tool_call>'
    assert (
        tok.decode(tok.encode("Où est ma commande #W12? 42,50 €", add_special_tokens=False))
        == "Où est ma commande #W12? 42,50 €"
    )


TOOLS = [
    tool_schema("get_order", "Look up an order.", {"order_id": {"type": "string"}}),
    tool_schema("cancel_order", "Cancel an order.", {"order_id": {"type": "string"}, "reason": {"type": "string"}}),
]
CONVERSATION = [
    Message.system("You are a shop agent."),
    Message.user("Cancel #W1 please."),
    Message.assistant(
        "Checking first.",
        [
            ToolCall(id="c1", name="get_order", arguments={"order_id": "#W1"}),
            ToolCall(id="c2", name="get_order", arguments={"order_id": "#W2"}),
        ],
    ),
    Message.tool("c1", '{"status": "pending"}', name="get_order"),
    Message.tool("c2", '{"status": "delivered"}', name="get_order"),
    Message.assistant(
        None, [ToolCall(id="c3", name="cancel_order", arguments={"order_id": "#W1", "reason": "ordered by mistake"})]
    ),
    Message.tool("c3", '{"status": "cancelled"}'),
    Message.assistant("Done: #W1 is cancelled."),
    Message.user("Thanks!"),
]


def _render(tiny_model_dir: Path, messages: list[Message], tools: list | None, **kw) -> str:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return tok.apply_chat_template(to_template_messages(messages), tools=tools, tokenize=False, **kw)


def test_template_renders_tools_calls_and_results(tiny_model_dir: Path) -> None:
    text = _render(tiny_model_dir, CONVERSATION, TOOLS, add_generation_prompt=True)
    turns = text.split("<|im_end|>\n")
    assert [t.split("\n", 1)[0] for t in turns[:-1]] == [
        "<|im_start|>system",
        "<|im_start|>user",
        "<|im_start|>assistant",
        "<|im_start|>user",
        "<|im_start|>assistant",
        "<|im_start|>user",
        "<|im_start|>assistant",
        "<|im_start|>user",
    ]
    system = turns[0]
    assert system.startswith("<|im_start|>system\nYou are a shop agent.\n\n# Tools\n")
    tools_block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert tools_block.splitlines() == [
        '{"type": "function", "function": {"name": "get_order", "description": "Look up an order.", "parameters": '
        '{"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"], "additionalProperties": false}}}',
        '{"type": "function", "function": {"name": "cancel_order", "description": "Cancel an order.", "parameters": '
        '{"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}, '
        '"required": ["order_id", "reason"], "additionalProperties": false}}}',
    ]
    assert turns[2] == (
        "<|im_start|>assistant\nChecking first.\n"
        '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W2"}}\n</tool_call>'
    )
    assert turns[3] == (  # consecutive tool results share one user turn
        '<|im_start|>user\n<tool_response>\n{"status": "pending"}\n</tool_response>\n'
        '<tool_response>\n{"status": "delivered"}\n</tool_response>'
    )
    assert turns[4] == (
        '<|im_start|>assistant\n<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": "#W1", "reason": "ordered by mistake"}}\n'
        "</tool_call>"
    )
    assert turns[5] == '<|im_start|>user\n<tool_response>\n{"status": "cancelled"}\n</tool_response>'
    assert turns[6] == "<|im_start|>assistant\nDone: #W1 is cancelled."
    assert turns[8] == "<|im_start|>assistant\n"  # generation prompt


def test_template_openai_wire_arguments_and_no_tools(tiny_model_dir: Path) -> None:
    # OpenAI wire format (arguments as a JSON string) renders the same as parsed arguments
    wire = [m.to_openai() for m in CONVERSATION]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tok.apply_chat_template(wire, tools=TOOLS, tokenize=False) == _render(tiny_model_dir, CONVERSATION, TOOLS)
    plain = _render(tiny_model_dir, CONVERSATION[:2], None, add_generation_prompt=False)
    assert (
        plain == "<|im_start|>system\nYou are a shop agent.<|im_end|>\n<|im_start|>user\nCancel #W1 please.<|im_end|>\n"
    )
    no_system = _render(tiny_model_dir, CONVERSATION[1:2], TOOLS, add_generation_prompt=True, enable_thinking=False)
    assert no_system.startswith("<|im_start|>system\n# Tools\n")
    assert no_system.endswith(
        "<|im_start|>user\nCancel #W1 please.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_cli_builds_the_tiny_model(tmp_path: Path) -> None:
    from gapforge.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["dev", "tiny-model", str(tmp_path / "m"), "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert "seed 2" in result.output and "model.safetensors" in result.output and "tokenizer.json" in result.output
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "chat_template.jinja").is_file()
    weights = (tmp_path / "m" / "model.safetensors").read_bytes()
    again = runner.invoke(app, ["dev", "tiny-model", str(tmp_path / "m"), "--seed", "3"])
    assert again.exit_code == 2 and "already holds a model (config.json)" in again.output and "--force" in again.output
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == weights  # refused: the model there is untouched
    forced = runner.invoke(app, ["dev", "tiny-model", str(tmp_path / "m"), "--seed", "3", "--force"])
    assert forced.exit_code == 0 and (tmp_path / "m" / "model.safetensors").read_bytes() != weights

    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["dev", "tiny-model", str(tmp_path / "file")])
    assert result.exit_code == 2
    assert "is a file" in result.output and "Traceback" not in result.output


def test_build_refuses_a_file_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ServingError, match="is a file"):
        build_tiny_model(tmp_path / "file")
