"""The second held-out split (`evaluation.unseen_env`): every task of another target spec (other shop instances),
played by every policy beside the held-out split, stored as `unseen:<policy>`, reported and compared apart; a spec
that shares tasks with the target is refused before anything runs, and its openings are held out from synthesis."""

from __future__ import annotations

from pathlib import Path

import pytest
from router_helpers import store_trained_capabilities
from typer.testing import CliRunner

from gapforge.agents.analysis.split import split_openings
from gapforge.cli import app
from gapforge.config import load_config
from gapforge.envs.registry import make_env
from gapforge.errors import ConfigError
from gapforge.evaluation.comparison import comparisons
from gapforge.evaluation.report import write_report
from gapforge.preflight import check_target
from gapforge.run_session import RunOptions, create_run
from gapforge.store import Store

CAPS = ["precondition_verification", "structured_data_reasoning"]
TARGET, UNSEEN = "shop?instances=0,51", "shop?instances=52"


def _split(store: Store, run: str) -> list[str]:
    target = make_env(TARGET)
    held = ["shop-refusal-001", "shop-i51-refusal-002", "shop-lookup-001", "shop-i51-write-001"]
    analysis = ["shop-refusal-002", "shop-i51-refusal-001"]
    store.put_split(
        run,
        env=TARGET,
        seed=0,
        fraction=0.5,
        analysis_tasks=analysis,
        heldout_tasks=held,
        families={t: target.task_family(t) for t in [*held, *analysis]},
    )
    return held


def test_a_target_that_shares_tasks_with_the_unseen_split_is_refused_before_the_run(workspace: Path) -> None:
    def cfg(unseen: str):
        sets = [f"workspace={workspace}", f"rollouts.env={TARGET}", f"evaluation.unseen_env={unseen}"]
        return load_config(None, sets, environ={})

    check_target(cfg(UNSEEN))  # other instances: nothing shared
    with pytest.raises(ConfigError) as e:
        check_target(cfg("shop?instances=51-52"))
    assert "evaluation.unseen_env" in str(e.value) and "shares 44 task id(s)" in str(e.value)
    assert "\n" not in str(e.value)
    other = str(Path(__file__).resolve().parents[2] / "examples" / "my_agent_env.py") + ":BillingEnv"
    with pytest.raises(ConfigError) as e:  # played with the held-out split's focus family, which it does not have
        check_target(
            cfg(other).model_copy(
                update={"evaluation": cfg(other).evaluation.model_copy(update={"focus_family": "policy_refusal"})}
            )
        )
    assert str(e.value).startswith("evaluation.focus_family: evaluation.unseen_env") and "'policy_refusal'" in str(
        e.value
    )


def test_the_unseen_openings_are_held_out_from_synthesis(workspace: Path) -> None:
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run = store.create_run("trace", {}, run_id="r-unseen", versions={})
        _split(store, run)
        plain = split_openings(store, run)
        guarded = split_openings(store, run, unseen_env=UNSEEN)
    assert plain is not None and guarded is not None
    unseen = make_env(UNSEEN)
    extra = {t: texts for t, texts in guarded.heldout.items() if t not in plain.heldout}
    assert sorted(extra) == sorted(unseen.task_ids())
    first = unseen.task_ids()[0]
    assert extra[first] == [unseen.reset(first)[-1].content]


@pytest.mark.docker
def test_every_policy_plays_the_unseen_records_and_they_are_reported_apart(
    workspace: Path, tiny_model_dir: Path, docker_client
) -> None:
    from gapforge.sandbox.image import build_image, image_is_current

    tag = "gapforge-sandbox:latest"
    if not image_is_current(docker_client, tag):
        build_image(docker_client, tag, method="local-python")
    cfg = load_config(
        None,
        [
            f"workspace={workspace}",
            "policy.kind=local",
            f"policy.local_path={tiny_model_dir}",
            "policy.max_new_tokens=4",
            "rollouts.max_turns=1",
            f"rollouts.env={TARGET}",
            f"evaluation.unseen_env={UNSEEN}",
            "evaluation.trials=1",
            "evaluation.comparisons=[]",
            "routing.backend=gate",
            "routing.gate.max_tokens=64",
            "evaluation.routing_seeds=2",
            f"sandbox.image={tag}",
            "sandbox.pool_size=1",
            "sandbox.memory_mb=256",
        ],
        environ={},
    )
    with Store(cfg.store_url) as store:
        run = create_run(store, "trace", "run", cfg, RunOptions())
        store_trained_capabilities(store, run, workspace, tiny_model_dir, CAPS)
        held = _split(store, run)

    where = ["--set", f"workspace={workspace}", "--set", "executor.local_rollout_workers=1"]
    res = CliRunner().invoke(app, ["evaluate", run, *where], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    unseen_ids = make_env(UNSEEN).task_ids()
    with Store(cfg.store_url) as store:
        rows = {e.name: e.metrics for e in store.evaluations(run)}
        for policy in ("base", "trace_routed", *(f"adapter:{c}" for c in CAPS)):
            held_row, unseen_row = rows[f"eval:{policy}"], rows[f"unseen:{policy}"]
            assert held_row["env"] == TARGET and held_row["tasks"] == len(held)
            assert unseen_row["env"] == UNSEEN and unseen_row["tasks"] == len(unseen_ids) == 44
            assert unseen_row["child_run"] != held_row["child_run"]
            played = {e.task_id for e in store.episodes(unseen_row["child_run"])}
            assert played == set(unseen_ids)  # every unseen task, none of the target's
        assert sorted(rows["unseen:trace_routed"]["routing"]) == sorted(unseen_ids)
        lines = comparisons(store, run, cfg)
        report = write_report(store, run, workspace / "report")
    assert any(line.startswith("comparison on the held-out split") for line in lines)
    assert any(line.startswith(f"comparison on the unseen records ({UNSEEN})") for line in lines)
    text = report.path.read_text()
    assert "## Evaluation on the held-out split" in text and "## Evaluation on the unseen records" in text
    assert (workspace / "report" / "unseen_eval_pass_rate.png").is_file()
