"""The vLLM stand-in (`python -m tests.fakes.vllm_standin`) on the tiny model with Qwen3's real template, through the clients
gapforge uses against vLLM: chat with tools, runtime LoRA loading under versioned names, router scoring, vLLM's refusals."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gapforge.envs.protocol import Message, tool_schema
from gapforge.serving.errors import ServingError
from gapforge.serving.vllm_backend import VLLMBackend

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [tool_schema("get_order", "Look up an order by id.", {"order_id": {"type": "string"}})]
FLAGS = [
    "--enable-lora",
    "--max-lora-rank",
    "8",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--port",
    "0",
]


@contextmanager
def standin(model: Path, *flags: str, runtime_lora: bool = True) -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True" if runtime_lora else ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.vllm_standin", str(model), "--served-model-name", "Qwen/Qwen3-8B", *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # "serving NAME on URL" once it answers
        assert line.startswith("serving Qwen/Qwen3-8B on "), line
        yield line.split()[-1]
    finally:
        proc.kill()
        proc.wait()


def _adapter(model_dir: Path, out: Path, rank: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir), LoraConfig(r=rank, target_modules=["q_proj", "v_proj"])
    )
    model.save_pretrained(out)
    return out


def test_chat_lora_loading_and_scoring_through_gapforges_vllm_clients(qwen3_model_dir: Path, tmp_path: Path) -> None:
    adapter = _adapter(qwen3_model_dir, tmp_path / "precondition", rank=8)
    with standin(qwen3_model_dir, *FLAGS) as url:
        backend = VLLMBackend(url, "Qwen/Qwen3-8B", {"precondition": adapter}, max_new_tokens=8)
        assert asyncio.run(backend.ensure_registered()) == [backend.served["precondition"]]
        assert asyncio.run(backend.ensure_registered()) == []  # listed now: not loaded twice
        convo = [Message.system("You help."), Message.user("Where is #W1?")]
        for name in (None, "precondition"):
            said = asyncio.run(backend.policy(name, temperature=1.0).respond(convo, TOOLS))
            assert said.role == "assistant"
        scored = httpx.post(
            f"{url}/completions",
            json={
                "model": "Qwen/Qwen3-8B",
                "prompt": [[1, 2, 3]],
                "max_tokens": 1,
                "logprobs": 1,
                "logprob_token_ids": [5, 6],
                "return_tokens_as_token_ids": True,
            },
        ).json()
        top = scored["choices"][0]["logprobs"]["top_logprobs"][0]
        assert set(top) == {"token_id:5", "token_id:6"} and all(v < 0 for v in top.values())
        too_big = _adapter(qwen3_model_dir, tmp_path / "r16", rank=16)
        with pytest.raises(ServingError, match="greater than max_lora_rank 8"):
            asyncio.run(VLLMBackend(url, "Qwen/Qwen3-8B", {"r16": too_big}).ensure_registered())
        long = [Message.user("x " * 9000)]
        with pytest.raises(Exception, match="exceeds the model context"):
            asyncio.run(backend.policy(None).respond(long, TOOLS))


def test_runtime_lora_loading_needs_vllms_env_flag(qwen3_model_dir: Path, tmp_path: Path) -> None:
    adapter = _adapter(qwen3_model_dir, tmp_path / "a", rank=8)
    with standin(qwen3_model_dir, *FLAGS, runtime_lora=False) as url:
        with pytest.raises(ServingError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
            asyncio.run(VLLMBackend(url, "Qwen/Qwen3-8B", {"a": adapter}).ensure_registered())
