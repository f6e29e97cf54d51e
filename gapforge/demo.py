"""`gapforge demo`: the whole TRACE graph, offline, on the built-in `shop` env.

Real: the Docker sandbox, the taught tiny base policy with its planted deficits (it skips the precondition check before
acting, mostly in `policy_refusal`, and hands lookups to a human agent after reading the record), the rollouts, the
statistics, the self-test of every generated env, GRPO + LoRA on CPU, the router, the evaluation on held-out tasks.
Scripted: only the LLM roles (analyst, generator, reviewer) answer from recordings; the demo says so at the start and at
the end, with how to point it at a real endpoint and model. The run is a normal graph run (kind "demo"): killed midway,
it finishes with `gapforge run --resume RUN` from the same directory (its config is stored).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gapforge.cli_common import UsageError, console
from gapforge.config import GapforgeConfig
from gapforge.run_config import load_tree
from gapforge.run_session import RunOptions, create_run

# The demo's embedded defaults (gapforge/demo_profile.yaml: the user's --config / --set still apply on top).
DEMO_PROFILE = Path(__file__).with_name("demo_profile.yaml")
DEMO_SETTINGS: list[str] = yaml.safe_load(DEMO_PROFILE.read_text())["settings"]
POWERED_SETTINGS: list[str] = yaml.safe_load(DEMO_PROFILE.read_text())["powered"]  # `gapforge demo --powered`

SCRIPTED_NOTE = (
    "scripted roles: the analyst, the environment generator and the code reviewer answer from recorded "
    "outputs (ScriptedChatModel; labels follow rules over each trajectory). Everything else is real."
)
REAL_NOTE = (
    "for a real run: set llm.kind=openai and llm.endpoint (OPENAI_API_KEY), serve a policy with vLLM and set "
    "policy.kind=endpoint (or policy.local_path for a local model) — a ready config for tau2 + Qwen3 on a GPU "
    "is configs/tau2-retail-qwen3-gpu.yaml (docs/gpu.md)."
)


def demo_config(
    cfg: GapforgeConfig, user_overrides: list[str] | None = None, *, powered: bool = False
) -> GapforgeConfig:
    """The user's config with the demo profile applied (`powered`: its powered settings too; the user's own --set
    wins)."""
    return load_tree(cfg.dump(), DEMO_SETTINGS + (POWERED_SETTINGS if powered else []) + list(user_overrides or []))


def _require_docker(cfg: GapforgeConfig) -> None:
    from gapforge.sandbox.docker_backend import docker_client
    from gapforge.sandbox.errors import SandboxError
    from gapforge.sandbox.image import build_image

    try:
        client = docker_client()
    except SandboxError as e:
        raise UsageError(
            f"the demo needs the Docker sandbox ({e}); `make demo` starts Docker when run as root"
        ) from None
    used = build_image(client, cfg.sandbox.image, log=lambda s: console.print(f"  {s}", highlight=False))
    console.print(
        f"sandbox image {cfg.sandbox.image}: {'current' if used == 'cached' else f'built with {used}'}", highlight=False
    )


def _speed(path: Path) -> None:
    """This machine's speed reference (machines called "2 cores" differ 2x or more): the stage times at the end read against it."""
    from gapforge.demo_policy.artifact import speed_reference

    try:
        s = speed_reference(path)
    except Exception as e:  # noqa: BLE001 - a reference number, never a reason to stop the demo
        console.print(
            f"speed reference: not measured ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
            highlight=False,
        )
        return
    console.print(
        f"speed reference: the base policy decodes {s['tokens_per_s']:.0f} tokens/s here (greedy, one sequence, "
        f"{s['threads']} torch thread{'s' if s['threads'] > 1 else ''})",
        highlight=False,
    )


def with_base_policy(cfg: GapforgeConfig, overrides: list[str] | None = None) -> GapforgeConfig:
    """The demo's base policy, always a local one: the user's own model directory (`--set policy.local_path=DIR`
    alone suffices) or the one shipped in the repository. `cfg` has the demo profile applied (demo_config); the
    user's own --set still wins."""
    if cfg.policy.local_path:
        console.print(f"base policy: {cfg.policy.local_path} (given; the shipped policy is not used)", highlight=False)
        return load_tree(cfg.dump(), ["policy.kind=local", *(overrides or [])])
    # the tiny base policy shipped in the repository (demo_policy.artifact): taught once for the project, never by the demo
    from gapforge.demo_policy.artifact import SHIPPED, ArtifactError, describe

    try:
        console.print(f"base policy: {describe(SHIPPED)}", highlight=False)
    except ArtifactError as e:
        raise UsageError(str(e)) from None
    return load_tree(cfg.dump(), ["policy.kind=local", f"policy.local_path={SHIPPED}", *(overrides or [])])


def run_demo(cfg: GapforgeConfig, overrides: list[str] | None = None, *, powered: bool = False) -> int:
    """Prepare (sandbox image, taught model), then run the graph; returns the exit code. `powered`: the profile's
    powered settings (ten shops as the target, five more as the unseen-records split)."""
    from gapforge.cli_drive import drive
    from gapforge.store.runs import new_run_id
    from gapforge.wiring import open_store

    run_id = new_run_id()
    console.print(f"run {run_id}", highlight=False)
    console.rule("[bold]gapforge demo: TRACE on the built-in shop env, offline")
    console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
    cfg = demo_config(cfg, overrides, powered=powered)
    _require_docker(cfg)
    cfg = with_base_policy(cfg, overrides)
    _speed(Path(cfg.policy.local_path))
    store = open_store(cfg)
    options = RunOptions()
    create_run(store, "demo", "demo", cfg, options, run_id)
    code = drive(cfg, store, run_id, options, fresh=True, last_line=False)
    if code == 0:
        from gapforge.evaluation.registry import summary_lines
        from gapforge.evaluation.scaling import gate_line

        router = store.get_evaluation(run_id, "router")
        analyses = summary_lines(store, run_id, cfg, "analysis")  # oracle routing, routed TRACE over 1 and 2 adapters
        for line in [*gate_line(router.metrics if router is not None else None), *analyses]:
            console.print(line, highlight=False, soft_wrap=True)
    console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
    console.print(REAL_NOTE, highlight=False, soft_wrap=True)
    if code == 0:
        for line in summary_lines(store, run_id, cfg, "baseline"):  # base / GRPO-on-target / adapters / TRACE
            console.print(line, highlight=False, soft_wrap=True)
    console.print(f"inspect: gapforge state {run_id} | gapforge history {run_id}", highlight=False, soft_wrap=True)
    console.print(f"run {run_id}", highlight=False)
    return code
