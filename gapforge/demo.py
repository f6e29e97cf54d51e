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
# Measured ~10 min on 2 CPU cores with the taught model cached (README has the run).
DEMO_SETTINGS: list[str] = [
    "llm.kind=scripted",
    "rollouts.env=shop",
    "rollouts.samples=6",  # 6 (not 4): with fewer, some sampling seeds leave a family without any success to contrast
    # the taught tiny policy passes most often at 0.7 (THE shop: 20%; greedy 16%, 1.0 9%); GRPO still samples at training.temperature
    "policy.temperature=0.7",
    "rollouts.concurrency=8",  # batched local generation; each episode seeds from its (task, sample), so this is as reproducible as 1
    "rollouts.max_turns=10",
    "policy.max_new_tokens=96",
    "analysis.passes=3",
    "analysis.bootstrap=200",
    "synthesis.max_attempts=3",
    "synthesis.validation_seeds=10",
    "synthesis.rollout_budget=64",
    # GRPO readiness sized for the tiny policy: on the recorded envs its mean reward is ~0.1-0.16 (mostly
    # the no-wrong-write credits) with a spread in ~25% of the groups; the defaults (mean >= 0.15, 50%
    # informative) are for real models and reject them all (the precondition env stays marginal even here)
    "grpo_readiness.groups=8",
    "grpo_readiness.samples=4",
    "grpo_readiness.min_informative=0.25",
    "grpo_readiness.mean_low=0.05",
    "grpo_readiness.concurrency=8",  # batched too, and as reproducible (the check sets each episode's key)
    # training.TrainingConfig.tiny(), shortened: GRPO + LoRA on CPU
    "training.lora_rank=8",
    "training.lora_alpha=16",
    "training.learning_rate=0.002",
    "training.max_steps=8",
    "training.groups_per_step=2",
    "training.num_generations=4",
    "training.max_turns=8",
    "training.malformed_tool_calls=continue",
    "training.max_new_tokens=64",
    "training.max_completion_length=1536",
    "training.train_seeds=32",
    "training.heldout_seeds=8",
    "training.heldout_samples=1",
    "training.eval_every=4",
    "training.save_every=4",
    # one episode per held-out task and policy (22 each): every policy plays the same (task, trial) seeds, so the paired
    # differences stay meaningful; 2 trials cost ~2 more minutes on 2 cores
    "evaluation.trials=1",
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


def _taught_policy(cfg: GapforgeConfig) -> Path:
    """The tiny base policy taught offline with its planted deficit (built once, cached by recipe hash)."""
    try:
        from training.teach import TeachConfig, teach
    except ModuleNotFoundError as e:
        raise UsageError(f"the taught tiny model needs the training stage ({e.name} is missing)") from None
    path = teach(cfg.workspace / "models", TeachConfig(seed=cfg.seed), progress=lambda m: console.print(f"  {m}", highlight=False))
    console.print(f"base policy: {path} (tiny Qwen3, taught offline, planted deficit)", highlight=False)
    return path


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
    if cfg.policy.kind == "local" and cfg.policy.local_path:  # the user's own base model (--set policy.local_path=DIR)
        console.print(f"base policy: {cfg.policy.local_path} (given; the taught tiny model is not built)", highlight=False)
    else:
        model = _taught_policy(cfg)
        cfg = demo_config(cfg, ["policy.kind=local", f"policy.local_path={model}", *(overrides or [])])
    store = open_store(cfg)
    options = RunOptions()
    store.create_run("demo", run_record("demo", cfg, options), run_id)
    code = drive_run(cfg, store, run_id, options, fresh=True, last_line=False)
    console.print(SCRIPTED_NOTE, highlight=False, soft_wrap=True)
    console.print(REAL_NOTE, highlight=False, soft_wrap=True)
    console.print(f"inspect: gapforge state {run_id} | gapforge history {run_id}", highlight=False, soft_wrap=True)
    console.print(f"run {run_id}", highlight=False)
    return code
