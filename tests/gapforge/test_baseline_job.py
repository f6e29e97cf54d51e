"""The GRPO-on-target job: the adapters' settings, the budget of every adapter together, the evaluation's user simulator."""

from __future__ import annotations

from types import SimpleNamespace

from gapforge.agents.config import EndpointConfig
from gapforge.config import GapforgeConfig, TrainingConfig, load_config
from gapforge.stages.training import baseline_job
from gapforge.training.budget import training_rollout_budget
from gapforge.training.envs import EnvSpec, _user_model

SPLIT = SimpleNamespace(env="tau2:retail", analysis_tasks=[f"t{i:02d}" for i in range(12)])


def _cfg() -> GapforgeConfig:
    return GapforgeConfig(training=TrainingConfig.tiny(max_steps=16, groups_per_step=2, num_generations=8))


def test_the_baseline_spends_every_adapters_rollouts_with_their_settings() -> None:
    cfg = _cfg()
    for n in (1, 2):
        job = baseline_job(cfg, SPLIT, n_adapters=n, base_model="/m", out_dir="/o", run_id="r")
        assert job.config.max_steps * job.config.rollouts_per_step == training_rollout_budget(cfg, n) == n * 16 * 16
        own = {"max_steps", "heldout_samples", "eval_every"}
        assert job.config.model_dump(exclude=own) == cfg.training.model_dump(
            exclude=own
        )  # LoRA rank, lr, groups, K, temperature
        # evaluated at the same fractions of its budget as an adapter: as many candidate checkpoints
        assert job.config.max_steps // job.config.eval_every == cfg.training.max_steps // cfg.training.eval_every
        assert job.config.eval_every == n * cfg.training.eval_every
    twice = baseline_job(
        cfg, SPLIT, n_adapters=2, base_model="/m", out_dir="/o", run_id="r", scale=2.0, learning_rate=1e-3
    )
    assert twice.config.max_steps == 64 and twice.config.learning_rate == 1e-3
    env = twice.env
    assert (
        set(env.train_tasks).isdisjoint(env.heldout_tasks)
        and sorted(env.train_tasks + env.heldout_tasks) == SPLIT.analysis_tasks
    )


def test_it_trains_against_the_user_simulator_it_is_evaluated_with(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("USER_SIM_KEY", "sk-not-in-the-spec")
    assert baseline_job(_cfg(), SPLIT, n_adapters=1, base_model="/m", out_dir="/o", run_id="r").env.user == "scripted"
    path = tmp_path / "c.yaml"
    path.write_text(
        "rollouts: {user: llm}\nllm: {kind: openai, endpoint: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: USER_SIM_KEY}}\n"
    )
    cfg = load_config(path, [])
    job = baseline_job(cfg, SPLIT, n_adapters=1, base_model="/m", out_dir="/o", run_id="r")
    assert job.env.user == "llm" and job.env.user_endpoint["base_url"] == "http://127.0.0.1:9/v1"
    assert (
        cfg.llm.endpoint.api_key is not None and "sk-not-in-the-spec" not in job.model_dump_json()
    )  # the spec never carries a key
    model = _user_model(EnvSpec.model_validate_json(job.env.model_dump_json()))
    assert isinstance(model, EndpointConfig) and model.model == "m"  # τ² drives its own simulator from the endpoint
    assert model.api_key.get_secret_value() == "sk-not-in-the-spec"  # read by the job process from the variable named


def test_an_llm_user_without_an_endpoint_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="user_endpoint"):
        EnvSpec(kind="target", target="shop", train_tasks=["a"], heldout_tasks=["b"], user="llm").check()


def test_the_baseline_selects_on_as_many_episodes_as_an_adapter() -> None:
    """An adapter selects its checkpoint on heldout_seeds x heldout_samples episodes (16 x 2 here); the baseline's few
    held-back target tasks get enough samples each to match (12 tasks -> every 4th, 3, held back -> 11 samples each = 33)."""
    cfg = _cfg()
    job = baseline_job(cfg, SPLIT, n_adapters=1, base_model="/m", out_dir="/o", run_id="r")
    per_adapter = cfg.training.heldout_seeds * cfg.training.heldout_samples
    held = len(job.env.heldout_tasks)
    assert held == 3 and job.config.heldout_samples == 11
    assert per_adapter <= held * job.config.heldout_samples < per_adapter + held


def test_its_selection_tasks_are_a_quarter_of_the_analysis_split_across_its_families() -> None:
    """A large analysis split (ten shop instances: 220 tasks) holds back up to training.heldout_seeds tasks from every
    family for the baseline's checkpoint selection, not a handful; a small one (the 44-task demo's 22) a quarter."""
    from collections import Counter

    from gapforge.envs.registry import make_env
    from gapforge.training.budget import baseline_tasks

    shop = make_env("shop?instances=0,51-59")
    analysis = sorted(shop.task_ids())[::2]
    train, held = baseline_tasks(analysis, most=32)
    assert len(held) == 32 and set(train).isdisjoint(held) and sorted(train + held) == analysis
    families = Counter(shop.task_family(t) for t in held)
    assert len(families) == 4 and min(families.values()) >= 5
    small = [f"t{i:02d}" for i in range(22)]
    train, held = baseline_tasks(small, most=32)
    assert len(held) == 6 and len(train) == 16
    assert baseline_tasks(["only"], most=32) == ([], ["only"])  # nothing to train on: the job spec refuses it


def test_an_analysis_split_of_one_task_skips_the_baseline_saying_why(tmp_path) -> None:
    import asyncio

    from gapforge.stages.training import train_baseline
    from gapforge.store import Store

    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        run = store.create_run("trace", {})
        store.put_capability(run, "refusal", definition="refuses what it cannot do")
        store.put_adapter(run, "refusal", path=str(tmp_path), metrics={}, status="done", capability="refusal")
        families = {"t0": "lookup", "t1": "lookup"}
        store.put_split(
            run, env="shop", seed=0, fraction=0.5, analysis_tasks=["t0"], heldout_tasks=["t1"], families=families
        )
        sc = SimpleNamespace(cfg=_cfg(), store=store)
        done = asyncio.run(train_baseline(sc, run))  # type: ignore[arg-type]
    assert done.adapter is None and not done.error and "analysis split has 1 task:" in done.skipped
