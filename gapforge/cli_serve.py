"""`gapforge serve RUN`: the routed OpenAI-compatible endpoint over a run's adapters."""

from __future__ import annotations

from typing import Annotated

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    console,
    err_console,
    get_config,
    handle_errors,
)
from gapforge.wiring import open_store

BaseOpt = Annotated[str | None, typer.Option("--base", help="base model dir (default: policy.local_path)")]


def base_model_dir(cfg, base: str | None) -> str:
    from pathlib import Path

    path = base or cfg.policy.local_path
    if not path or not (Path(path) / "config.json").is_file():
        raise UsageError(f"base model '{path}' is not a Hugging Face model dir: pass --base DIR or set policy.local_path")
    return path


def register(app: typer.Typer) -> None:
    @app.command("serve")
    @handle_errors
    def serve(
        run: Annotated[str, typer.Argument(help="run id whose adapters to serve")],
        port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8100,
        host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
        base: BaseOpt = None,
        backend: Annotated[str, typer.Option("--backend", help="local (transformers+PEFT) | vllm (forward to a multi-LoRA vLLM)")] = "local",
        vllm_url: Annotated[str | None, typer.Option("--vllm-url", help="vLLM /v1 URL (backend vllm)")] = None,
        vllm_model: Annotated[str | None, typer.Option("--vllm-model", help="the base model's name on vLLM")] = None,
        api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="env var holding the API key clients must send (Bearer); every route but /health")] = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Serve /v1/chat/completions, /v1/models and /health; each conversation routed once to an adapter."""
        import asyncio

        from aiohttp import web

        from agents.config import is_loopback
        from evaluation.service import build_router, load_backend, run_artifacts
        from gapforge.config import read_secret
        from serving.routed_server import ROUTED_MODEL, RoutedApp

        cfg = get_config(config, set_)
        api_key = read_secret(api_key_env) if api_key_env else None
        if api_key is None and not is_loopback(host):
            err_console.print(f"warning: serving on {host} without an API key: anyone who reaches port {port} can use the model; "
                              "pass --api-key-env NAME", highlight=False, soft_wrap=True)
        store = open_store(cfg)
        store.get_run(run)
        base_dir = base_model_dir(cfg, base)
        artifacts = run_artifacts(store, run, max_example_chars=cfg.routing.max_example_chars)
        if backend == "local":
            chat = load_backend(base_dir, artifacts, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed)
            router = build_router(artifacts, routing=cfg.routing, backend=chat, tokenizer_path=base_dir)
        elif backend == "vllm":
            from serving.vllm_backend import VLLMBackend

            if not vllm_url or not vllm_model:
                raise UsageError("--backend vllm needs --vllm-url and --vllm-model")
            chat = VLLMBackend(vllm_url, vllm_model, dict(artifacts.adapter_paths), max_new_tokens=cfg.policy.max_new_tokens)
            asyncio.run(chat.ensure_registered())
            router = build_router(artifacts, routing=cfg.routing, tokenizer_path=base_dir)
        else:
            raise UsageError(f"--backend '{backend}': use local or vllm")
        routed = RoutedApp(chat, router.route_messages if cfg.routing.enabled else None, api_key=api_key)
        names = ", ".join(c["name"] for c in artifacts.capabilities) or "none (base model only)"
        guard = f"API key from {api_key_env}" if api_key else "no API key"
        console.print(f"serving run {run} on http://{host}:{port}/v1 ({guard}) — model '{ROUTED_MODEL}' routes to: {names}", highlight=False)
        web.run_app(routed.app(), host=host, port=port, print=None)
