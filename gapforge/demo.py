"""`gapforge demo`: the whole TRACE graph, offline, on the built-in `shop` env.

Real: the Docker sandbox, the taught tiny base policy with its planted deficit
(it skips the precondition check before acting, mostly in `policy_refusal`),
the rollouts, the statistics, the self-test of every generated env, GRPO + LoRA
on CPU, the router, the evaluation on held-out tasks. Scripted: only the LLM
roles (analyst, generator, reviewer) answer from recordings — the demo says so
at the start and at the end, with how to point it at a real endpoint and model.

The run is a normal graph run (kind "demo"): killed midway, it finishes with
`gapforge run --resume RUN` from the same directory (its config is stored).
"""

from __future__ import annotations

from pathlib import Path

from gapforge.cli_common import UsageError, console
from gapforge.config import GapforgeConfig, load_config
from gapforge.run_session import RunOptions, run_record

# The demo's embedded defaults (the user's --config / --set still apply on top).
# Measured on 2 CPU cores with the shipped policy (README has the run and its stage times).
DEMO_SETTINGS: list[str] = [
    "llm.kind=scripted",
    "rollouts.env=shop",
    "rollouts.samples=6",  # 6 (not 4): with fewer, some sampling seeds leave a family without any success to contrast
    # the shipped tiny policy is measured at 0.7 (artifacts/shop-policy/teach.json); GRPO still samples at training.temperature
    "policy.temperature=0.7",
    "rollouts.concurrency=8",  # batched local generation; each episode seeds from its (task, sample), so this is as reproducible as 1
    "rollouts.max_turns=10",
    "policy.max_new_tokens=96",
    "analysis.passes=3",
    "analysis.bootstrap=200",
    "synthesis.max_attempts=3",
    "synthesis.validation_seeds=10",
    "synthesis.rollout_budget=160",  # readiness: 8 groups x 8 samples per attempt that reaches it (two in the recorded story)
    # GRPO readiness with the policy that will train, at the training group size: default window [0.2, 0.8], >= 50% informative
    "grpo_readiness.groups=8",
    "grpo_readiness.samples=8",
    "grpo_readiness.concurrency=8",  # batched too, and as reproducible (the check sets each episode's key)
    # the tiny policy samples coherent episodes at 0.7 (shop pass 28%) and mostly noise at 1.0: GRPO and readiness sample at 0.7
    "training.temperature=0.7",
    "grpo_readiness.temperature=0.7",
    # training.TrainingConfig.tiny(), sized for ~4 min of CPU: GRPO + LoRA
    "training.lora_rank=8",
    "training.lora_alpha=16",
    "training.learning_rate=0.002",
    "training.max_steps=12",
    "training.groups_per_step=2",
    "training.num_generations=8",
    "training.max_turns=8",
    "training.malformed_tool_calls=continue",
    "training.max_new_tokens=96",  # an address change's call is ~80 tokens
    "training.max_completion_length=1536",
    "training.train_seeds=32",
    "training.heldout_seeds=16",
    "training.heldout_samples=2",
    "training.eval_every=4",
    "training.save_every=4",
    "training.patience=3",
    # a ~1M-parameter base cannot read the routing prompt: route by the openings each adapter was trained on (README)
    "routing.backend=openings",
    # one episode per held-out task and policy, but 40 per planted-family task for base and TRACE (200 paired episodes):
    # every policy plays the same (task, trial) seeds, so the paired differences stay meaningful
    "evaluation.trials=1",
    "evaluation.family_trials.policy_refusal=40",
    "evaluation.focus_family=policy_refusal",
    # the GRPO-on-target baseline trains another adapter with the same rollout budget (~3 more minutes on 2 cores):
    # off in the demo, on by default (--set evaluation.baseline_grpo=true; bench/effect.py measures without it)
    "evaluation.baseline_grpo=false",
]

SCRIPTED_NOTE = (
    "scripted roles: the analyst, the environment generator and the code reviewer answer from recorded "
    "outputs (ScriptedChatModel; labels follow rules over each trajectory). Everything else is real."
)
REAL_NOTE = (
    "for a real run: set llm.kind=openai and llm.endpoint (OPENAI_API_KEY), serve a policy with vLLM and set "
    "policy.kind=endpoint (or policy.local_path for a local model) — a ready config for tau2 + Qwen3 on a GPU "
    "is configs/tau2-retail-qwen3-gpu.yaml (README: 'A real run on a GPU')."
)


def demo_config(cfg: GapforgeConfig, user_overrides: list[str] | None = None) -> GapforgeConfig:
    """The user's config with the demo profile applied (the user's own --set wins)."""
    import tempfile

    import yaml

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(cfg.dump(), fh)
        path = Path(fh.name)
    try:
        return load_config(path, DEMO_SETTINGS + list(user_overrides or []))
    finally:
        path.unlink(missing_ok=True)


def _require_docker(cfg: GapforgeConfig) -> None:
    from sandbox.docker_backend import docker_client
    from sandbox.errors import SandboxError
    from sandbox.image import build_image

    try:
        client = docker_client()
    except SandboxError as e:
        raise UsageError(f"the demo needs the Docker sandbox ({e}); `make demo` starts Docker when run as root") from None
    used = build_image(client, cfg.sandbox.image, log=lambda s: console.print(f"  {s}", highlight=False))
    console.print(f"sandbox image {cfg.sandbox.image}: {'current' if used == 'cached' else f'built with {used}'}", highlight=False)


def _shipped_policy() -> Path:
    """The tiny base policy shipped in the repository (training.artifact): taught once, by us, never by the demo."""
    from training.artifact import SHIPPED, ArtifactError, describe

    try:
        console.print(f"base policy: {describe(SHIPPED)}", highlight=False)
    except ArtifactError as e:
        raise UsageError(str(e)) from None
    return SHIPPED


def run_demo(cfg: GapforgeConfig, overrides: list[str] | None = None) -> int:
    """Prepare (sandbox image, taught model), then run the graph; returns the exit code."""
    from gapforge.cli_run import drive_run
    from gapforge.wiring import open_store
    from store.runs import new_run_id

    run_id = new_run_id()
    console.print(f"run {run_id}", highlight=False)
    console.rule("[bold]gapforge demo: TRACE on the built-in shop env, offline")
    console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
    cfg = demo_config(cfg, overrides)
    _require_docker(cfg)
    if cfg.policy.local_path:  # the user's own base model (--set policy.local_path=DIR)
        console.print(f"base policy: {cfg.policy.local_path} (given; the shipped policy is not used)", highlight=False)
        cfg = demo_config(cfg, ["policy.kind=local", *(overrides or [])])
    else:
        cfg = demo_config(cfg, ["policy.kind=local", f"policy.local_path={_shipped_policy()}", *(overrides or [])])
    store = open_store(cfg)
    options = RunOptions()
    store.create_run("demo", run_record("demo", cfg, options), run_id)
    code = drive_run(cfg, store, run_id, options, fresh=True, last_line=False)
    console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
    console.print(REAL_NOTE, highlight=False, soft_wrap=True)
    console.print(f"inspect: gapforge state {run_id} | gapforge history {run_id}", highlight=False, soft_wrap=True)
    console.print(f"run {run_id}", highlight=False)
    return code
