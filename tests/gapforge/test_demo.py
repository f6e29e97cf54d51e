"""`gapforge demo`, the README's main job: the whole graph offline on shop (needs Docker: CI starts it).

The end-to-end test kills the demo midway (kill -9 after the capability selection)
and finishes it with `gapforge run --resume RUN` from the same directory, as a user
would: the run's config is stored with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapforge.sandbox.docker_backend import list_containers
from gapforge.store import Store


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "GAPFORGE_WORKSPACE": str(tmp_path / "ws"),
        "HF_HUB_OFFLINE": "1",
        **extra,
    }


def test_demo_without_docker_names_the_missing_thing(tmp_path: Path) -> None:
    env = _env(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
    proc = subprocess.run(
        [sys.executable, "-m", "gapforge.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the demo needs the Docker sandbox" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(2400)  # the demo and its resume: far past the suite's 600-s default
@pytest.mark.skipif(
    os.environ.get("GAPFORGE_DEMO_E2E") != "1",
    reason="the graph (3.2 min on a 2-core machine at 760 tokens/s, estimated 7.7-8.8 min at 213-276 tokens/s; the shipped policy: no teaching) "
    "with its resume would push CI past its 20-minute budget: set GAPFORGE_DEMO_E2E=1 to run it",
)
def test_demo_killed_midway_finishes_with_run_resume(tmp_path: Path, docker_client) -> None:
    env = _env(tmp_path)
    log = tmp_path / "demo.txt"
    demo = subprocess.Popen(
        [sys.executable, "-m", "gapforge.cli", "demo"],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 900
    while "select: done" not in log.read_text():
        assert demo.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, "the demo never reached select"
        time.sleep(0.5)
    demo.send_signal(signal.SIGKILL)
    demo.wait(60)
    first = log.read_text().splitlines()[0]
    assert first.startswith("run ")
    run_id = first.split()[1]
    assert "scripted roles: the analyst, the environment generator and the code reviewer" in log.read_text()

    resumed = subprocess.run(
        [sys.executable, "-m", "gapforge.cli", "run", "--resume", run_id],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
        check=False,
    )
    out = resumed.stdout
    assert resumed.returncode == 0, out[-4000:] + resumed.stderr[-4000:]
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0] == f"run {run_id}" and lines[-1] == f"run {run_id}"
    assert "scripted roles" in out and "configs/tau2-retail-qwen3-gpu.yaml" in out  # said again at the end
    assert "evaluation (held-out tasks)" in out and "unavailable" not in out
    assert (
        "policy_refusal: base " in out and "policy_refusal: TRACE − base " in out
    )  # the headline with its paired interval
    leftovers = list_containers(docker_client, f"gapforge.pid={demo.pid}")
    assert leftovers == [], "the killed demo's sandbox containers were not swept by the resumed run"
    with Store(f"sqlite:///{tmp_path / 'ws' / 'gapforge.db'}") as store:
        run = store.get_run(run_id)
        assert run.kind == "demo" and run.status == "done"
        assert store.capabilities(run_id, retained=True)
        assert any(a.capability == "precondition_verification" for a in store.adapters(run_id))
        names = {e.name for e in store.evaluations(run_id)}
        assert {
            "eval:base",
            "eval:trace_routed",
            "eval:capability_hints",
        } <= names  # the GRPO-on-target baseline is off in the demo
    report = next(ln.split("report: ", 1)[1] for ln in lines if ln.startswith("report: "))
    assert Path(report).is_file()


def test_a_given_model_directory_alone_makes_the_demo_use_it(tmp_path: Path) -> None:
    from gapforge.config import load_config
    from gapforge.demo import demo_config, with_base_policy

    own = tmp_path / "my-model"
    own.mkdir()
    cfg = demo_config(load_config(None, [f"workspace={tmp_path / 'ws'}"], environ={}), [f"policy.local_path={own}"])
    assert cfg.policy.kind == "scripted"  # the path alone, as a user gives it
    used = with_base_policy(cfg, [f"policy.local_path={own}"])
    assert used.policy.kind == "local" and used.policy.local_path == str(own)
    shipped = with_base_policy(demo_config(load_config(None, [f"workspace={tmp_path / 'ws'}"], environ={})))
    assert shipped.policy.kind == "local" and shipped.policy.local_path.endswith("shop-policy")


def test_the_powered_demo_holds_out_40_tasks_of_every_family_in_each_split(tmp_path: Path) -> None:
    """`gapforge demo --powered`: its target split half and half (the demo's analysis.split_fraction) and its unseen
    records give every family >= 40 held-out tasks in each split, >= 200 a split; the two share no task, and the
    user's own --set still wins."""
    from collections import Counter

    from gapforge.agents.analysis.split import split_tasks
    from gapforge.config import load_config
    from gapforge.demo import demo_config, with_base_policy
    from gapforge.envs.registry import make_env
    from gapforge.preflight import check_target

    base = load_config(None, [f"workspace={tmp_path / 'ws'}"], environ={})
    cfg = demo_config(base, powered=True)
    check_target(cfg)  # builds both specs and refuses shared tasks
    target, unseen = make_env(cfg.rollouts.env), make_env(cfg.evaluation.unseen_env or "")
    families = {t: target.task_family(t) for t in target.task_ids()}
    split = split_tasks(families, cfg.analysis.split_fraction, cfg.seed, env=cfg.rollouts.env)
    for held in (
        Counter(families[t] for t in split.heldout),
        Counter(unseen.task_family(t) for t in unseen.task_ids()),
    ):
        assert len(held) == 4 and min(held.values()) >= 40 and sum(held.values()) >= 200
    assert not set(target.task_ids()) & set(unseen.task_ids())
    assert cfg.evaluation.family_trials == {} and cfg.evaluation.trials == 2
    assert demo_config(base, ["evaluation.unseen_env=shop?instances=70"], powered=True).evaluation.unseen_env == (
        "shop?instances=70"
    )
    assert demo_config(base).evaluation.unseen_env is None  # the 44-task demo stays as it was
    used = with_base_policy(cfg)  # the shipped policy, the powered settings kept
    assert used.rollouts.env == cfg.rollouts.env and used.evaluation.unseen_env == cfg.evaluation.unseen_env
