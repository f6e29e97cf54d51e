"""`gapforge run --estimate` / `gapforge demo --estimate` (gapforge/estimate.py): the stage arithmetic against the
demo's own counts, the probe against the shipped policy, and the command that stores nothing."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.demo import demo_config, with_base_policy
from gapforge.estimate import estimate_lines, estimate_rows
from gapforge.estimate_probe import Probe, probe_target

# What the demo spent in run r-20261203-8909bb (2026-12-03, `gapforge state`): rollouts and LLM tokens per stage
DEMO_SPENT = {
    "collect_rollouts": (154, 0),
    "discover": (0, 25_054 + 800),
    "label": (0, 1_354_659 + 91_329),
    "validate": (344, 0),
    "train": (512, 0),
    "train_baseline": (512, 0),
    "evaluate": (1060, 0),  # the routed policy copies what the base and the adapters played
}


ROOT = Path(__file__).resolve().parents[2]


def _demo_cfg(tmp_path: Path):
    return with_base_policy(demo_config(load_config(None, [f"workspace={tmp_path}"], environ={})))


def test_the_demo_estimate_is_within_2x_of_what_the_demo_spends(tmp_path: Path) -> None:
    cfg = _demo_cfg(tmp_path)
    probe, tasks, families = probe_target(cfg, episodes=4)  # the shipped policy on 4 shop tasks, in memory
    assert probe.episodes == 4 and probe.policy_tokens > 20 and probe.text_tokens > probe.policy_tokens
    assert probe.user_prompt == 0  # the shop's scripted user
    rows = {r.stage: r for r in estimate_rows(cfg, probe, tasks, families)}
    # counted exactly as the stages count: the 22 analysis tasks x 6 samples and the 22 held-out tasks once, 3 passes
    # over the analysis split, the training budget, and the evaluation's trials per task and policy (the demo plays
    # 1,104 held-out episodes)
    assert (rows["collect_rollouts"].policy_rollouts, rows["label"].llm_calls) == (154, 396)
    assert (rows["train"].policy_rollouts, rows["train_baseline"].policy_rollouts) == (512, 512)
    assert rows["evaluate"].policy_rollouts == 1104
    for stage, (rollouts, tokens) in DEMO_SPENT.items():
        row = rows[stage]
        if rollouts:
            assert rollouts / 2 <= row.policy_rollouts <= 2 * rollouts, (stage, row)
        if tokens:
            assert tokens / 2 <= row.prompt_tokens + row.completion_tokens <= 2 * tokens, (stage, row)
    cells = estimate_lines(cfg, list(rows.values()), probe, throughput=1000.0)
    total = cells[-1]
    assert total[0] == "total" and int(total[4].replace(",", "")) == sum(r.policy_rollouts for r in rows.values())
    assert re.fullmatch(r"\$\d+\.\d\d", total[6])


def test_a_probe_with_an_llm_user_counts_its_tokens_per_episode() -> None:
    probe = Probe(4, 300.0, 2000.0, 800.0, 40.0, 1000.0)
    cfg = load_config(None, ["policy.kind=scripted", "rollouts.user=llm", "analysis.max_retained=2"], environ={})
    rows = {r.stage: r for r in estimate_rows(cfg, probe, [f"t{i}" for i in range(10)], {})}
    collect = rows["collect_rollouts"]
    assert collect.policy_rollouts == 10 * cfg.rollouts.samples
    assert (collect.prompt_tokens, collect.completion_tokens) == (
        800 * collect.policy_rollouts,
        40 * collect.policy_rollouts,
    )
    assert rows["train"].prompt_tokens == 0  # a synthetic env's user is scripted


def test_run_estimate_prints_the_table_and_stores_nothing(tmp_path: Path) -> None:
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    ws = tmp_path / "ws"
    res = CliRunner().invoke(
        app,
        [
            "run", "--estimate", "--env", "shop", "--policy", f"scripted:{answers}",
            "--set", "rollouts.tasks=[shop-lookup-001, shop-refusal-001]", "--set", "rollouts.max_turns=2",
            "--set", f"workspace={ws}",
        ],
        env={"COLUMNS": "220"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert re.search(r"collect_rollouts\s+│(\s+0\s+│){3}\s+2\s+│.*2 analysis tasks x 1 samples", res.output), res.output
    assert re.search(r"│ total\s+│\s+\d+\s+│[\s\d,]+│[\s\d,]+│[\s\d,]+│\s+[\d.]+\s+│\s+\$\d+\.\d\d", res.output)
    assert "probe: 2 episodes" in res.output and "assumed: 3 capabilities retained" in res.output
    assert "warning" not in res.output  # the shop has recorded LLM roles: `gapforge run` takes this config
    assert not ws.exists() or not any(ws.iterdir())  # no store, no run
    own = CliRunner().invoke(
        app,
        ["run", "--estimate", "--env", f"{ROOT / 'examples/my_agent_env.py'}:BillingEnv", "--policy",
         f"scripted:{answers}", "--set", "rollouts.max_turns=1", "--set", f"workspace={ws}"],
        env={"COLUMNS": "220"},
    )  # fmt: skip
    assert own.exit_code == 0, own.output  # priced, and said that `run` would refuse it as it is
    assert "warning: `gapforge run` refuses this config as it is: llm.kind=scripted answers the analyst" in own.output
    resumed = CliRunner().invoke(app, ["run", "--estimate", "--resume", "r-x", "--set", f"workspace={ws}"])
    assert resumed.exit_code == 2 and "--estimate are for a new run" in resumed.output


def test_the_powered_demo_estimate_counts_both_held_out_splits(tmp_path: Path) -> None:
    """`gapforge demo --powered --estimate` against run r-20261203-c02bb6 (2026-12-03): 1,540 collected episodes (220
    analysis tasks x 6, 220 held-out tasks once), and 4,400 evaluation episodes played of 5,280 planned (6 policies x
    440 tasks x 2 trials; the routed policy copied the rest from the base and the adapters)."""
    from gapforge.estimate_probe import unseen_families
    from gapforge.wiring import make_target_env_factory

    cfg = with_base_policy(demo_config(load_config(None, [f"workspace={tmp_path}"], environ={}), powered=True))
    env, _ = make_target_env_factory(cfg, cfg.rollouts.env)
    try:
        families = {t: env.task_family(t) for t in env.task_ids()}
    finally:
        env.close()
    unseen = unseen_families(cfg)
    assert unseen is not None and len(unseen) == 220 and not set(unseen) & set(families)
    probe = Probe(4, 300.0, 2000.0, 0.0, 0.0, 1000.0)
    rows = {r.stage: r for r in estimate_rows(cfg, probe, sorted(families), families, unseen)}
    assert rows["collect_rollouts"].policy_rollouts == 1540
    assert rows["evaluate"].policy_rollouts == 5280 and "220 of the unseen records" in rows["evaluate"].note
    assert 4400 <= rows["evaluate"].policy_rollouts <= 2 * 4400
    without = {r.stage: r for r in estimate_rows(cfg, probe, sorted(families), families)}
    assert without["evaluate"].policy_rollouts == 2640
