"""`gapforge serve RUN`: the routed OpenAI-compatible endpoint over a run's adapters, as the run evaluated them.

The run's stored config (gapforge/run_config.py) names the base model, the policy backend and the router; the
router's data is read from the store (evaluation/router_record.py), so the served router is the evaluated one
and serving starts no sandbox container. Flags override the run's settings, and the line `override: ...` says
which: `--base DIR` = policy.local_path, `--backend local` = policy.kind=local, `--backend vllm --vllm-url URL
--vllm-model NAME` = policy.kind=endpoint with that endpoint.

`gapforge serve --router DIR --base BASE_DIR` serves a bundle `gapforge export` wrote (gapforge/export.py): the
router and adapters it holds, the routing settings it was evaluated with, no store; the config (`--config`, `--set`)
gives the rest (serving limits, the vLLM endpoint).

Under load and at shutdown it follows the config's `serving` section (serving/config.py): 429 + Retry-After past
`max_queue` requests held, 504 past `request_timeout_s`, and SIGTERM / SIGINT drain the requests in flight for up
to `drain_timeout_s` (new ones get 503) before the command exits 0. `--port 0` binds a free port; the `serving run
... on http://HOST:PORT/v1` line names it once the socket listens.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gapforge.cli_common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    check_can_listen,
    console,
    err_console,
    get_config,
    handle_errors,
    run_config,
)

if TYPE_CHECKING:
    from gapforge.config import GapforgeConfig
    from gapforge.store import Store

BaseOpt = Annotated[str | None, typer.Option("--base", help="base model dir (default: the run's policy.local_path)")]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="local (transformers+PEFT) | vllm (forward to a multi-LoRA vLLM); default: the run's policy.kind",
    ),
]
KeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env", help="env var holding the API key clients must send (Bearer); every route but /health"
    ),
]


def base_flags(base: str | None) -> list[str]:
    return [f"policy.local_path={base}"] if base else []


BASE_HOW = "pass --base DIR or set policy.local_path"  # a command without --base says `--set policy.local_path=DIR`


def base_model_dir(cfg: GapforgeConfig, how: str = BASE_HOW) -> str:
    """The base model's weights (policy.local_path), checked to be a Hugging Face model dir; `how`: how to give one."""
    path = cfg.policy.local_path
    if not path:
        raise UsageError(f"no base model given: {how.replace('--base DIR', '--base DIR (its weights)')}")
    if not (Path(path) / "config.json").is_file():
        raise UsageError(f"base model '{path}' is not a Hugging Face model dir: {how}")
    return path


def local_base(cfg: GapforgeConfig, how: str = BASE_HOW) -> GapforgeConfig:
    """The config with the base loaded here: a run stored without a config reads policy.kind's default (scripted), which
    has no weights to serve or evaluate; its policy.local_path (--base) is a local model."""
    base_model_dir(cfg, how)
    if cfg.policy.kind == "scripted":
        cfg.policy = cfg.policy.model_copy(update={"kind": "local"})
    return cfg


def backend_flags(backend: str | None, vllm_url: str | None, vllm_model: str | None) -> list[str]:
    if backend is None:
        if vllm_url or vllm_model:
            raise UsageError("--vllm-url / --vllm-model go with --backend vllm")
        return []
    if backend == "local":
        return ["policy.kind=local"]
    if backend == "vllm":
        return [
            "policy.kind=endpoint",
            *([f"policy.endpoint.base_url={vllm_url}"] if vllm_url else []),
            *([f"policy.endpoint.model={vllm_model}"] if vllm_model else []),
        ]
    raise UsageError(f"--backend '{backend}': use local or vllm")


def served(cfg: GapforgeConfig, store: Store, run_id: str) -> tuple[Any, Any, Any, str]:
    """(artifacts, chat backend, router, where the router came from) of the run, built by the routing stage the evaluation
    used (`RunStages.routing`: gapforge/stages/routing.py): without the GRPO-on-target baseline, the router's data not written."""
    import asyncio

    from gapforge.stages import stage_context

    if cfg.policy.kind == "endpoint" and not cfg.policy.endpoint.base_url:
        raise UsageError(
            "policy.kind=endpoint needs the vLLM server's URL: pass --vllm-url URL or set policy.endpoint.base_url"
        )
    stages = stage_context(
        local_base(cfg), store, lambda _where, text: err_console.print(text, highlight=False, soft_wrap=True)
    )  # e.g. an adapter left out
    try:
        artifacts, chat, router = stages.routing.routed(run_id, baseline=False, keep=False)
    finally:
        asyncio.run(stages.deps.aclose_pool())  # opened only when a run without a stored router had its openings read
    return artifacts, chat, router, stages.routing.source


def register(app: typer.Typer) -> None:
    @app.command("serve")
    @handle_errors
    def serve(
        run: Annotated[str | None, typer.Argument(help="run id whose adapters to serve (or --router)")] = None,
        router_dir: Annotated[
            str | None,
            typer.Option("--router", help="the router/ dir of a bundle `gapforge export` wrote: serve it, no store"),
        ] = None,
        port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8100,
        host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
        base: BaseOpt = None,
        backend: BackendOpt = None,
        vllm_url: Annotated[str | None, typer.Option("--vllm-url", help="vLLM /v1 URL (backend vllm)")] = None,
        vllm_model: Annotated[str | None, typer.Option("--vllm-model", help="the base model's name on vLLM")] = None,
        api_key_env: KeyEnvOpt = None,
        config: ConfigOpt = None,
        set_: SetOpt = None,
    ) -> None:
        """Serve /v1/chat/completions, /v1/models and /health; each conversation routed once to an adapter, as the run evaluated
        (RUN: from the run's store; --router DIR: from an exported bundle, with --base DIR the base model).
        Past serving.max_queue requests at once: 429 + Retry-After; past serving.request_timeout_s: 504; SIGTERM drains (exit 0)."""
        import asyncio

        from gapforge.agents.config import is_loopback
        from gapforge.config import read_secret
        from gapforge.serving.http_server import serve_until_signalled
        from gapforge.serving.routed_server import ROUTED_MODEL, RoutedApp

        flags = [*base_flags(base), *backend_flags(backend, vllm_url, vllm_model)]
        if (run is None) == (router_dir is None):
            both = " (not both)" if run is not None else ""
            raise UsageError(f"name what to serve: a run id, or --router DIR (a bundle `gapforge export` wrote){both}")
        check_can_listen(host, port)  # before the model loads
        bundle = store = None
        if router_dir is not None:
            from gapforge.bundle import bundle_routed, bundle_settings, load_bundle

            bundle = load_bundle(router_dir)
            cfg = get_config(config, [*bundle_settings(bundle, config), *(set_ or []), *flags], check_workspace=False)
            if cfg.policy.kind == "scripted":  # the default: a bundle is served from weights (--base), here or on vLLM
                cfg = local_base(cfg)
        else:
            cfg, store = run_config(run, config, [*(set_ or []), *flags])
        api_key = read_secret(api_key_env) if api_key_env else None
        if api_key is None and not is_loopback(host):
            err_console.print(
                f"warning: serving on {host} without an API key: anyone who reaches port {port} can use the model; "
                "pass --api-key-env NAME",
                highlight=False,
                soft_wrap=True,
            )
        if bundle is not None:
            from gapforge.config import parse_override

            keys = [parse_override(item)[0] for item in set_ or []]
            routing_set = [key for key in keys if key.startswith("routing.")]
            artifacts, chat, router = bundle_routed(bundle, cfg, base_model_dir(cfg), routing_set)
            run, routing_backend = f"{bundle.data['run']} (bundle {router_dir})", bundle.record.backend
            enabled = router.config.enabled
        else:
            artifacts, chat, router, source = served(cfg, store, run)
            routing_backend, enabled = cfg.routing.backend, cfg.routing.enabled
            if source != "stored":
                read = " from its synthetic envs' openings (in the sandbox)" if routing_backend == "gate" else ""
                err_console.print(
                    f"note: run {run} stores no router over these adapters (never built for them): "
                    f"built now{read}, not stored",
                    highlight=False,
                    soft_wrap=True,
                )
        limits = cfg.serving
        routed = RoutedApp(chat, router.route_messages if enabled else None, api_key=api_key, limits=limits)
        names = ", ".join(c["name"] for c in artifacts.capabilities) or "none (base model only)"
        guard = f"API key from {api_key_env}" if api_key else "no API key"
        routing = f"routing.backend={routing_backend}" if enabled else "routing off"

        def say(line: str) -> None:
            console.print(line, highlight=False, soft_wrap=True)

        def ready(bound: int) -> None:
            say(
                f"serving run {run} on http://{host}:{bound}/v1 ({guard}) — base {cfg.policy.local_path}, {routing}; "
                f"model '{ROUTED_MODEL}' routes to: {names}; max_queue {limits.max_queue}, request_timeout_s {limits.request_timeout_s:g}"
            )

        drained = asyncio.run(
            serve_until_signalled(routed, host, port, drain_timeout_s=limits.drain_timeout_s, say=say, ready=ready)
        )
        ended = (
            "every one finished"
            if drained.finished
            else f"{drained.cut} cut at serving.drain_timeout_s={limits.drain_timeout_s:g} (answered 503)"
        )
        say(f"stopped: {drained.in_flight} request(s) were in flight, {ended}")
