"""`gapforge demo`: the offline end-to-end job on embedded defaults — what exists
so far, run for real, with nothing downloaded:

1. build (or reuse) the sandbox image, offline when no registry is reachable;
2. self-test the two example synthetic envs in the Docker sandbox;
3. build a tiny Qwen-architecture model in the workspace (random weights);
4. collect rollouts of that model on the built-in `shop` env and summarise them.

The tiny model is untrained, so its pass rate is ~0: the demo shows the
pipeline, not a result. It grows into the full TRACE loop as stages land.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gapforge.cli_common import console, err_console
from gapforge.config import GapforgeConfig

EXAMPLES = ("precondition_verification", "structured_data_reasoning")


def _sandbox_stage(cfg: GapforgeConfig) -> bool:
    """Steps 1-2. Returns False when a self-test failed. No Docker -> say so loudly and skip."""
    from envs import examples
    from gapforge.cli_env import run_validation
    from sandbox.docker_backend import docker_client
    from sandbox.errors import SandboxError
    from sandbox.image import build_image

    console.rule("[bold]1. sandbox image")
    try:
        client = docker_client()
    except SandboxError as e:
        err_console.print(f"[bold yellow]skipping the sandbox steps:[/] {e}", highlight=False)
        return True
    used = build_image(client, cfg.sandbox.image, log=lambda s: console.print(s, highlight=False))
    console.print(f"{cfg.sandbox.image}: {'current' if used == 'cached' else f'built with {used}'}", highlight=False)

    console.rule("[bold]2. self-test of the example synthetic envs (in the sandbox)")
    ok = True
    for name in EXAMPLES:
        path = Path(examples.__file__).with_name(f"{name}.py")
        outcome = run_validation(cfg, path, target="shop", seeds=cfg.synthesis.validation_seeds)
        ok = ok and outcome.passed
    return ok


def _tiny_model(cfg: GapforgeConfig) -> Path:
    from serving.tiny_model import build_tiny_model

    console.rule("[bold]3. tiny local policy model")
    path = cfg.workspace / "models" / "tiny-qwen"
    if (path / "config.json").is_file():
        console.print(f"reusing {path}", highlight=False)
    else:
        build_tiny_model(path, seed=cfg.seed)
        console.print(f"built {path} (random weights, tokenizer trained on the spot)", highlight=False)
    return path


def run_demo(cfg: GapforgeConfig, *, tasks: int = 8) -> int:
    """Run the demo; returns the process exit code."""
    from agents.rollouts import CollectPlan, collect
    from agents.rollouts import rollout_summary
    from gapforge.cli_rollouts import render_summary
    from gapforge.wiring import make_target_env_factory, open_store
    from serving.local import LocalPolicy

    store = open_store(cfg)
    run_id = store.create_run("demo", {"command": "demo", "config": cfg.dump()})
    console.print(f"run {run_id}", highlight=False)
    sandbox_ok = _sandbox_stage(cfg)
    model_dir = _tiny_model(cfg)

    console.rule("[bold]4. rollouts of the tiny model on the built-in shop env")
    probe, make_env = make_target_env_factory(cfg, "shop")
    ids = probe.task_ids()
    step = max(1, len(ids) // tasks)
    chosen = ids[::step][:tasks]  # spread over the task families
    families = {t: probe.task_family(t) for t in chosen}
    policy = LocalPolicy(model_dir, temperature=cfg.policy.temperature, max_new_tokens=96, seed=cfg.seed, name="tiny-qwen")
    plan = CollectPlan(run_id=run_id, env="shop", tasks=chosen, samples=1, concurrency=2, max_turns=3)
    with console.status(f"collecting {len(chosen)} episodes..."):
        result = asyncio.run(collect(plan, make_env=make_env, policy=policy, sink=store, families=families))
    console.print(f"{result.ran} episodes ran, {result.skipped} already stored", highlight=False)
    render_summary(rollout_summary(store, run_id, "shop"))
    store.set_run_status(run_id, "done" if sandbox_ok else "failed")
    console.print(f"workspace: {cfg.workspace.resolve()}  (inspect: gapforge rollouts show {run_id})", highlight=False)
    if not sandbox_ok:
        err_console.print("[bold red]an example env failed its self-test[/]")
    console.print(f"run {run_id}", highlight=False)
    return 0 if sandbox_ok else 1
