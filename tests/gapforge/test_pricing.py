"""Dollars beside a run's counters (gapforge.pricing): stage prices by the endpoint's model, a capability's own and
shared cost, points per $100, and the config's checks."""

from __future__ import annotations

import pytest

from gapforge.config import load_config
from gapforge.errors import ConfigError
from gapforge.pricing import Models, PricingConfig, capability_costs, cost_section, spends, stage_dollars

PRICES = PricingConfig(tokens={"analyst-model": (1.0, 4.0), "user-model": (2.0, 2.0)}, cpu_hour=36.0, gpu_hour=360.0)
MODELS = Models(llm="analyst-model", user="user-model")
STATE = {
    "cost": {
        "collect_rollouts": {"policy_rollouts": 40, "cpu_s": 100.0, "prompt_tokens": 1e6, "completion_tokens": 5e5},
        "discover": {"llm_calls": 1, "prompt_tokens": 1e6, "completion_tokens": 1e5},
        "label": {"llm_calls": 30, "prompt_tokens": 2e6, "completion_tokens": 1e5, "cpu_s": 50.0},
        "synthesize": {"llm_calls": 3, "prompt_tokens": 3e5, "completion_tokens": 3e5},
        "validate": {"policy_rollouts": 200, "cpu_s": 300.0},
        "train": {"policy_rollouts": 512, "cpu_s": 1000.0, "gpu_s": 10.0},
        "build_router": {"cpu_s": 50.0},
        "train_baseline": {"policy_rollouts": 512, "cpu_s": 800.0, "prompt_tokens": 4e6, "completion_tokens": 1e6},
        "evaluate": {"policy_rollouts": 1000, "cpu_s": 400.0},
    },
    "capability_cost": {
        "a": {"llm_calls": 1, "prompt_tokens": 1e5, "completion_tokens": 1e5, "policy_rollouts": 356, "cpu_s": 650.0},
        "b": {"llm_calls": 2, "prompt_tokens": 2e5, "completion_tokens": 2e5, "policy_rollouts": 356, "cpu_s": 650.0},
    },
    "evaluation": {
        "base": {"pass_rate": 0.25},
        "trace_routed": {"pass_rate": 0.55},
        "baseline_grpo_target": {"pass_rate": 0.45},
    },
}


def test_a_stages_tokens_are_priced_at_the_model_its_endpoint_was_called_with() -> None:
    # the target's rollouts: the user simulator's model ($2 + $1) and 100 CPU-seconds at $36 an hour ($1)
    assert stage_dollars("collect_rollouts", STATE["cost"]["collect_rollouts"], PRICES, MODELS).value == pytest.approx(
        4.0
    )
    # the analyst: $2 prompt + $0.40 completion
    assert stage_dollars("label", STATE["cost"]["label"], PRICES, MODELS).value == pytest.approx(2.0 + 0.4 + 0.5)
    # a GPU's 10 s at $360 an hour ($1) beside 1000 CPU-seconds ($10)
    assert stage_dollars("train", STATE["cost"]["train"], PRICES, MODELS).value == pytest.approx(11.0)
    unpriced = stage_dollars("discover", {"prompt_tokens": 10}, PRICES, Models(llm="mystery", user="user-model"))
    assert unpriced.value == 0 and unpriced.unpriced == {"mystery"} and unpriced.text() == "$0.00+?"


def test_a_capability_carries_its_own_stages_and_an_equal_share_of_the_shared_ones() -> None:
    rows = {r.name: r for r in capability_costs(STATE, PRICES, MODELS)}
    # shared: collect $4 + discover $1.4 + label $2.9 + build_router $0.5 = $8.8, half each
    assert rows["a"].shared.value == pytest.approx(4.4) and rows["b"].shared.value == pytest.approx(4.4)
    assert rows["a"].own.value == pytest.approx(0.1 + 0.4 + 6.5)  # tokens at the LLM's prices, 650 CPU-s
    assert rows["b"].total.value == pytest.approx(0.2 + 0.8 + 6.5 + 4.4)
    assert capability_costs({"cost": STATE["cost"]}, PRICES, MODELS) == []  # a run from before per-capability counters


def test_trace_and_grpo_on_the_target_get_dollars_rollouts_and_points_per_100_dollars() -> None:
    trace, grpo = spends(STATE, PRICES, MODELS)
    # TRACE: shared $8.8 + synthesize $1.5 + validate $3 + train $11; GRPO on the target: 800 CPU-s $8, the user's tokens $8 + $2
    assert trace.dollars.value == pytest.approx(24.3) and trace.rollouts == 40 + 200 + 512
    assert grpo.dollars.value == pytest.approx(18.0) and grpo.rollouts == 512
    assert trace.gain_points == pytest.approx(30.0) and grpo.gain_points == pytest.approx(20.0)
    assert "+30.0 points over the base = +123.5 points per $100" in trace.line()
    assert grpo.line().endswith("+20.0 points over the base = +111.1 points per $100")
    assert (
        spends({"cost": {"collect_rollouts": {"cpu_s": 1.0}}}, PRICES, MODELS)[0].line().endswith("no evaluation yet")
    )
    section = "\n".join(cost_section(STATE, PRICES, MODELS))
    assert (
        "| train_baseline | 0 | 5,000,000 | 512 | 800 | 0 | $18.00 |" in section
        and "| a | $7.00 | $4.40 | $11.40 |" in section
    )


def test_pricing_is_checked_when_the_config_loads() -> None:
    cfg = load_config(None, ["pricing.cpu_hour=0.1", "pricing.tokens={m: [1, 2]}"], environ={})
    assert cfg.pricing.cpu_hour == 0.1 and cfg.pricing.tokens == {"m": (1.0, 2.0)}
    with pytest.raises(ConfigError, match="pricing.tokens.m: prices are \\$ per 1M tokens, not negative"):
        load_config(None, ["pricing.tokens={m: [-1, 2]}"], environ={})
    with pytest.raises(ConfigError, match="pricing.gpu_hour"):
        load_config(None, ["pricing.gpu_hour=-3"], environ={})


def test_the_report_stage_prices_the_graph_states_counters_at_the_configs_prices(tmp_path) -> None:
    """The report node hands the stage its state; the report's cost section is priced at `pricing` (here a user's)."""
    import asyncio
    from types import SimpleNamespace

    from gapforge.stages.report import report
    from gapforge.store import Store
    from gapforge.store.workspace import Workspace

    cfg = load_config(None, ["pricing.cpu_hour=36", "pricing.tokens={gpt-4o-mini: [1, 4]}"], environ={})
    with Store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        store.create_run("trace", {}, "r1")
        sc = SimpleNamespace(cfg=cfg, store=store, deps=SimpleNamespace(workspace=Workspace(tmp_path)))
        done = asyncio.run(report(sc, "r1", {"cost": {"label": {"prompt_tokens": 1e6, "cpu_s": 100.0}}}))
        text = open(done.path).read()
        bare = open(asyncio.run(report(sc, "r1", None, out=str(tmp_path / "bare"))).path).read()
    assert "## Cost" in text and "| label | 0 | 1,000,000 | 0 | 100 | 0 | $2.00 |" in text  # $1 tokens + $1 CPU
    assert "the LLM roles answered from recordings" in text  # llm.kind=scripted, the default
    assert "## Cost" not in bare  # a run without graph state (a standalone `gapforge rollouts` run)


def test_the_evaluate_stage_counts_an_llm_users_tokens_once_per_episode_played() -> None:
    """The routed policy's copies of the base's and an adapter's episodes (a copy keeps its source's policy name) are
    counted with their source only."""
    from types import SimpleNamespace

    from gapforge.stages.evaluation import _user_tokens

    def row(task: str, policy: str, p: int, c: int) -> SimpleNamespace:
        return SimpleNamespace(task_id=task, policy=policy, score_info={"user_tokens": [p, c]})

    runs = {
        "r.eval.base": [row("t1", "base", 100, 10), row("t2", "base", 200, 20)],
        "r.eval.adapter": [row("t2", "adapter:a", 30, 3)],
        "r.eval.routed": [row("t1", "base", 100, 10), row("t2", "adapter:a", 30, 3), row("t3", "trace_routed", 7, 1)],
    }
    store = SimpleNamespace(episodes=lambda run, env=None: runs[run])
    base = SimpleNamespace(policy="base", metrics={"child_run": "r.eval.base", "env": "shop"})
    alone = SimpleNamespace(policy="adapter:a", metrics={"child_run": "r.eval.adapter", "env": "shop"})
    routed = SimpleNamespace(policy="trace_routed", metrics={"child_run": "r.eval.routed", "env": "shop"})
    assert _user_tokens(store, [base, alone, routed]) == (337, 34)


def test_a_retained_capability_without_counters_still_takes_its_share_and_unpriced_tokens_give_no_ratio() -> None:
    three = {**STATE, "retained": ["a", "b", "c"]}  # c's branch failed before its first stage: no row of its own
    rows = {r.name: r for r in capability_costs(three, PRICES, MODELS)}
    assert set(rows) == {"a", "b"} and rows["a"].shared.value == pytest.approx(8.8 / 3)
    unpriced = Models(llm="analyst-model", user="someone-elses-model")  # the user simulator's model has no price
    trace, grpo = spends(STATE, PRICES, unpriced)
    assert grpo.dollars.unpriced == {"someone-elses-model"} and grpo.dollars.text().endswith("+?")
    assert grpo.line().endswith("(no points per $100: some of its tokens have no price)")
