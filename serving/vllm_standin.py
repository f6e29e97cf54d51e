"""`python -m serving.vllm_standin MODEL_DIR [vllm serve flags]`: the project's stand-in for `vllm serve`, on CPU.

No GPU and no vLLM here, so the GPU path is dry-run against this: serving/fake_vllm.py's HTTP API (the one
gapforge speaks to a vLLM server) backed by a real local model (serving.multi_adapter.MultiAdapterModel):
- /v1/chat/completions renders with `--chat-template FILE`, generates and parses tool calls
  (`--enable-auto-tool-choice --tool-call-parser hermes | llama3_json`, required: without them vLLM returns
  calls as text, so the stand-in refuses to start); with `--reasoning-parser qwen3` the
  <think> block comes back as `reasoning_content`, else inside `content` (as vLLM does); a prompt past the
  context is vLLM's 400;
- /v1/completions scores token-id prompts with the base model (the router's `logprob_token_ids`);
- LoRA adapters (`--enable-lora`) are served by name: `--lora-modules name=path` at start, or
  /v1/load_lora_adapter at run time when VLLM_ALLOW_RUNTIME_LORA_UPDATING is true (else that route is a
  404, as in vLLM); an adapter of rank above `--max-lora-rank` (default 16, vLLM's) is refused.
It takes the `vllm serve` flags of the README's GPU steps; GPU-only ones (--gpu-memory-utilization,
--tensor-parallel-size, --max-loras) are accepted and ignored, unknown flags refused. It prints one line
`serving NAME on URL` once it answers, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

from envs.errors import MalformedOutputError, PolicyError
from envs.protocol import Message, ToolCall
from serving.fake_vllm import FakeVLLMServer
from serving.multi_adapter import MultiAdapterModel


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m serving.vllm_standin", description=__doc__.splitlines()[0])
    p.add_argument("model", help="local Hugging Face model directory")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--chat-template", default=None, help="template file (default: the tokenizer's, as installed by serving.chat_format)")
    p.add_argument("--enable-lora", action="store_true")
    p.add_argument("--lora-modules", nargs="*", default=[], help="name=path ...")
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--tool-call-parser", choices=["hermes", "llama3_json"], default=None)
    p.add_argument("--reasoning-parser", choices=["qwen3"], default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    for ignored in ("--max-loras", "--gpu-memory-utilization", "--tensor-parallel-size"):
        p.add_argument(ignored, default=None, help="accepted, ignored (GPU only)")
    args = p.parse_args(argv)
    if not args.enable_auto_tool_choice or not args.tool_call_parser:  # vLLM would return the calls as text: say so now
        p.error("gapforge's rollouts need tool calls: add --enable-auto-tool-choice --tool-call-parser hermes (llama3_json for Llama)")
    return args


def _message(m: dict[str, Any]) -> Message:
    content = m.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    calls = [ToolCall(id=c.get("id") or f"call_{i}", name=c["function"]["name"],
                      arguments=json.loads(c["function"].get("arguments") or "{}") if isinstance(c["function"].get("arguments"), str)
                      else (c["function"].get("arguments") or {}))
             for i, c in enumerate(m.get("tool_calls") or [])]
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    return Message(role=m["role"], content=content, tool_calls=calls, tool_call_id=m.get("tool_call_id"), name=m.get("name"),
                   reasoning=reasoning if isinstance(reasoning, str) else None)


class StandIn:
    """The model behind the HTTP API: chat, scoring and LoRA loading, with vLLM's rules."""

    def __init__(self, args: argparse.Namespace) -> None:
        loras = dict(item.split("=", 1) for item in args.lora_modules)
        if loras and not args.enable_lora:
            raise SystemExit("--lora-modules needs --enable-lora")
        self.args = args
        self.served = args.served_model_name or args.model
        self.backend = MultiAdapterModel(args.model, loras, max_new_tokens=args.max_model_len or 8192, name=self.served)
        for name, path in loras.items():
            self._check_rank(name, path)
        if args.chat_template:
            self.backend.tokenizer.chat_template = Path(args.chat_template).read_text(encoding="utf-8")
        self.backend.tool_format = args.tool_call_parser or "hermes"

    def _check_rank(self, name: str, path: str) -> None:
        rank = json.loads((Path(path) / "adapter_config.json").read_text()).get("r", 0)
        if rank > self.args.max_lora_rank:
            raise ValueError(f"LoRA rank {rank} of '{name}' is greater than max_lora_rank {self.args.max_lora_rank}")

    def load(self, name: str, path: str) -> None:
        if not self.args.enable_lora:
            raise ValueError("LoRA is not enabled: start the server with --enable-lora")
        if not (Path(path) / "adapter_config.json").is_file():
            raise ValueError(f"no adapter at {path} (no adapter_config.json)")
        self._check_rank(name, path)
        self.backend.load_adapter(name, path)

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        adapter = None if body.get("model") == self.served else body.get("model")
        messages = [_message(m) for m in body.get("messages") or []]
        try:
            msg = asyncio.run(self.backend.respond(messages, body.get("tools") or [], adapter=adapter, temperature=float(body.get("temperature", 1.0)),
                                                   max_new_tokens=body.get("max_tokens") or body.get("max_completion_tokens")))
        except MalformedOutputError as e:  # vLLM's tool parser leaves a broken call as text
            return {"role": "assistant", "content": e.raw, "tool_calls": []}
        except PolicyError as e:  # e.g. the prompt is longer than the context
            raise ValueError(str(e)) from None
        out: dict[str, Any] = {"role": "assistant", "content": msg.content, "tool_calls": [c.to_openai() for c in msg.tool_calls]}
        if msg.reasoning is not None:
            if self.args.reasoning_parser:
                out["reasoning_content"] = msg.reasoning
            else:
                out["content"] = f"<think>\n{msg.reasoning}\n</think>\n\n{msg.content or ''}"
        return out

    def score(self, prompt: list[int], token_ids: list[int]) -> list[float]:
        import torch

        with self.backend.base_context(), torch.inference_mode():
            logits = self.backend.model(input_ids=torch.tensor([prompt])).logits[0, -1].float().log_softmax(-1)
        return [float(logits[t]) for t in token_ids]


def serve(argv: list[str] | None = None) -> None:
    args = _args(argv)
    standin = StandIn(args)
    runtime = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true")
    server = FakeVLLMServer(standin.served, scorer=standin.score, responder=standin.chat, loras={k: str(v) for k, v in standin.backend.adapter_paths.items()},
                            loader=standin.load, runtime_lora=runtime, host=args.host, port=args.port)
    with server:
        print(f"serving {standin.served} on {server.base_url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    serve()
