"""The graph through the CLI with fake stage services: run, runs, state, history, fork, review."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import load_config
from gapforge.wiring import open_store
from tests.fakes.fake_stages import row_counts
from tests.graph.conftest import calls

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def run_id_of(output: str) -> str:
    first, last = output.strip().splitlines()[0], output.strip().splitlines()[-1]
    assert first.startswith("run ") and last.startswith("run ")
    rid = first.split()[1]
    assert last.split()[1] == rid
    return rid


def history_rows(output: str) -> list[tuple[int, str, str, str]]:
    """(step, checkpoint id, node, next) of each history row."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 6 and cells[1].isdigit():
            rows.append((int(cells[1]), cells[2], cells[3], cells[6]))
    return rows


def test_run_end_to_end_then_inspect(fake_config: Path) -> None:
    code, out = invoke("run", "--config", str(fake_config))
    assert code == 0, out
    rid = run_id_of(out)
    assert "select: done; retained: alpha, beta" in out
    assert re.search(
        r"^stage times \(summed over capability branches\): collect_rollouts \d+ s, "
        r".*evaluate \d+ s.*; this invocation took \d+\.\d min$",
        out,
        re.M,
    ), out[-2000:]
    assert "validate (beta): verdict=not trivial" in out  # attempt 1 failed with evidence, then passed
    workspace = load_config(fake_config).workspace
    with open_store(load_config(fake_config)) as store:
        counts = row_counts(store, rid)
        assert store.get_run(rid).status == "done"
    assert counts == {
        "episodes": 10,
        "capabilities": 3,
        "labels": 60,
        "capability_stats": 6,
        "synthetic_envs": 3,
        "validations": 3,
        "adapters": 3,
        "evaluations": 2,  # adapters: alpha, beta, the GRPO-on-target baseline
    }

    code, out = invoke("runs", "--config", str(fake_config))
    assert code == 0 and rid in out and "50.0% → 70.0%" in out

    code, out = invoke("state", rid, "--config", str(fake_config))
    assert code == 0, out
    assert re.search(r"beta\s+│\s+trained\s+│\s+0\.40\s+│\s+0\.60\s+│\s+2\s+│\s+2\s+│\s+passed", out), out
    assert re.search(r"gamma\s+│\s+rejected", out)
    assert "0.20 → 0.70 (step 4)" in out  # held-out before → after and the checkpoint kept
    assert re.search(r"label\s+│\s+20\s", out)  # cost: 2 passes x 10 labeling calls
    assert "train_baseline: done" in out and re.search(
        r"train_baseline\s+│(\s+-\s+│){3}\s+16\s", out
    )  # its own node, its rollouts counted
    # per capability: its own stages' counters (beta: 2 generator calls, alpha and beta 16 training rollouts each)
    assert "cost per capability" in out
    assert re.search(r"alpha\s+│\s+1\s+│(\s+-\s+│){2}\s+16\s", out) and re.search(r"beta\s+│\s+2\s+│", out), out
    assert re.search(
        r"^TRACE \(collection, analysis, synthesis, training, router\): \$[\d.]+ and 42 policy rollouts; "
        r"\+20\.0 points over the base",
        out,
        re.M,
    ), out
    assert re.search(
        r"^GRPO on the target \(its training\): \$[\d.]+ and 16 policy rollouts; no evaluation yet", out, re.M
    )
    assert f"reports/{rid}.md" in out and (workspace / "reports" / f"{rid}.md").is_file()

    code, out = invoke("history", rid, "--config", str(fake_config))
    assert code == 0, out
    rows = history_rows(out)
    assert [r[2] for r in rows] == [
        "start",
        "collect_rollouts",
        "discover",
        "label",
        "label",
        "select",
        "review",
        "capability",
        "build_router",
        "train_baseline",
        "evaluate",
        "report",
    ]
    assert [r[0] for r in rows] == list(range(len(rows)))
    assert "dictionary: alpha, beta, gamma" in out


def test_fork_with_another_delta_reuses_rollouts_and_labels(fake_config: Path) -> None:
    code, out = invoke("run", "--config", str(fake_config))
    rid = run_id_of(out)
    workspace = load_config(fake_config).workspace
    _, hist = invoke("history", rid, "--config", str(fake_config))
    before_select = next(r[1] for r in history_rows(hist) if r[3] == "select")
    done_before = calls(workspace)

    code, out = invoke(
        "fork", rid, "--checkpoint", before_select, "--set", "analysis.delta=0.5", "--config", str(fake_config)
    )
    assert code == 0, out
    fid = run_id_of(out)
    assert fid != rid
    new_calls = calls(workspace)[len(done_before) :]
    assert not [c for c in new_calls if c.startswith(("rollout", "label", "discover"))], (
        new_calls
    )  # 0 new rollouts / labeling calls
    assert "reused 10 episodes, 3 capabilities, 60 labels" in out
    assert "select: done; retained: alpha" in out and "beta" not in out.split("retained:")[1].splitlines()[0]
    with open_store(load_config(fake_config)) as store:
        assert [c.name for c in store.capabilities(fid, retained=True)] == ["alpha"]
        assert sorted(c.name for c in store.capabilities(rid, retained=True)) == ["alpha", "beta"]  # parent untouched
        assert len(store.episodes(fid)) == 10 and len(store.labels(fid)) == 60  # copied from the parent, not redone
        assert store.get_run(fid).config["graph"]["forked_from"] == {"run": rid, "checkpoint": before_select}
        assert store.get_run(fid).config["config"]["analysis"]["delta"] == 0.5
    _, hist = invoke("history", fid, "--config", str(fake_config))
    assert f"fork of {rid}" in hist


def test_fork_refuses_a_checkpoint_after_select_and_unknown_ids(fake_config: Path) -> None:
    _, out = invoke("run", "--config", str(fake_config))
    rid = run_id_of(out)
    _, hist = invoke("history", rid, "--config", str(fake_config))
    after_select = next(r[1] for r in history_rows(hist) if r[2] == "select")
    code, out = invoke("fork", rid, "--checkpoint", after_select, "--config", str(fake_config))
    assert code == 2 and "fork from a checkpoint whose next step is" in out and "Traceback" not in out
    code, out = invoke("fork", rid, "--checkpoint", "nope", "--config", str(fake_config))
    assert code == 2 and "has no checkpoint 'nope'" in out
    code, out = invoke("state", "r-unknown", "--config", str(fake_config))
    assert code == 2 and "r-unknown" in out and "Traceback" not in out


def test_review_pauses_then_edit_and_resume(fake_config: Path) -> None:
    code, out = invoke("run", "--review", "--config", str(fake_config))
    assert code == 0, out
    rid = run_id_of(out)
    assert "paused before review" in out
    code, out = invoke("review", rid, "--config", str(fake_config))
    assert code == 0 and "retained: alpha, beta" in out
    code, out = invoke("review", rid, "--keep", "delta", "--config", str(fake_config))
    assert code == 2 and "unknown capability delta" in out
    code, out = invoke("review", rid, "--keep", "beta", "--config", str(fake_config))
    assert code == 0, out
    code, out = invoke("run", "--resume", rid, "--config", str(fake_config))
    assert code == 0, out
    with open_store(load_config(fake_config)) as store:
        assert [a.capability for a in store.adapters(rid)] == ["beta", None]  # None: the GRPO-on-target baseline
        assert store.get_run(rid).status == "done"
    code, out = invoke("state", rid, "--config", str(fake_config))
    assert re.search(r"alpha\s+│\s+dropped", out) and re.search(r"beta\s+│\s+trained", out)
    code, out = invoke("review", rid, "--approve", "--config", str(fake_config))
    assert code == 2 and "not waiting for a review" in out


def test_one_capability_crash_is_recorded_and_the_others_go_on(fake_config: Path) -> None:
    workspace = load_config(fake_config).workspace
    workspace.mkdir(parents=True)
    (workspace / "fail_train").write_text("alpha")
    code, out = invoke("run", "--config", str(fake_config))
    assert code == 0, out
    rid = run_id_of(out)
    assert "train (alpha): status=failed; error=train: RuntimeError: trainer process for alpha exited" in out
    assert "train (beta): status=trained" in out
    with open_store(load_config(fake_config)) as store:
        assert [a.capability for a in store.adapters(rid)] == ["beta", None]  # None: the GRPO-on-target baseline
        assert store.get_evaluation(rid, "trace_routed").metrics["pass_rate"] == pytest.approx(
            0.6
        )  # routed to beta only


def test_a_sandbox_lost_for_good_stops_the_run_with_exit_3_not_the_capability(fake_config: Path) -> None:
    workspace = load_config(fake_config).workspace
    workspace.mkdir(parents=True)
    (workspace / "sandbox_down").write_text("alpha")
    code, out = invoke("run", "--config", str(fake_config))
    assert code == 3 and "Traceback" not in out, out
    rid = out.split()[1]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "synthesis of alpha stopped: the sandbox kept failing" in errors[0]
    assert errors[0].endswith(f"resume with `gapforge run --resume {rid}`")
    assert "status=failed" not in out  # never recorded as the capability's failure
    with open_store(load_config(fake_config)) as store:
        assert store.get_run(rid).status == "incomplete"
    (workspace / "sandbox_down").unlink()
    code, out = invoke("run", "--resume", rid, "--config", str(fake_config))
    assert code == 0, out
    with open_store(load_config(fake_config)) as store:
        assert store.get_run(rid).status == "done" and {a.capability for a in store.adapters(rid)} == {
            "alpha",
            "beta",
            None,
        }


def test_an_endpoint_outage_stops_the_run_with_one_line_and_resume_continues(fake_config: Path) -> None:
    workspace = load_config(fake_config).workspace
    workspace.mkdir(parents=True)
    (workspace / "endpoint_down").write_text("")
    code, out = invoke("run", "--config", str(fake_config))
    assert code == 3 and "Traceback" not in out  # the endpoint's boundary: infrastructure, resumable
    rid = out.split()[1]
    assert f"kept failing (connection refused) after 4 retries: resume with `gapforge run --resume {rid}`" in out
    with open_store(load_config(fake_config)) as store:
        assert store.get_run(rid).status == "incomplete"
    (workspace / "endpoint_down").unlink()
    code, out = invoke("run", "--resume", rid, "--config", str(fake_config))
    assert code == 0, out
    assert (
        "collect_rollouts: done" not in out
    )  # finished before the outage: not redone (its time is in the stage-times line)
    assert calls(workspace).count("rollout task-0") == 1
    with open_store(load_config(fake_config)) as store:
        assert store.get_run(rid).status == "done" and row_counts(store, rid)["adapters"] == 3
