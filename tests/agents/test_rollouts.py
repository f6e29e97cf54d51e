"""Rollout collection: counts, idempotent resume (including after a real kill), summaries, CLI errors."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import run_id_in
from typer.testing import CliRunner

from gapforge.agents.config import EndpointConfig
from gapforge.agents.llm import make_chat_model
from gapforge.agents.policy import ChatModelPolicy
from gapforge.agents.rollouts import CollectPlan, collect, summarize
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.cli import app
from gapforge.envs.registry import make_env
from gapforge.store import Store
from tests.fakes.fake_openai import FakeOpenAIServer, tool_call_message

TASKS = ["shop-lookup-001", "shop-write-001", "shop-compound-001", "shop-refusal-001"]


def _greeter() -> ChatModelPolicy:
    model = ScriptedChatModel.from_dict({"policy": {"repeat": "Hello! How can I help?"}})
    return ChatModelPolicy(model, name="greeter")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'r.db'}")
    yield s
    s.close()


def test_collect_counts_families_and_resume(store: Store) -> None:
    probe = make_env("shop")
    assert set(TASKS) <= set(probe.task_ids()), "task ids of the shop env changed"
    families = {t: probe.task_family(t) for t in TASKS}
    run_id = store.create_run("rollouts", {})
    plan = CollectPlan(run_id=run_id, env="shop", tasks=TASKS, samples=3, concurrency=4, max_turns=2)

    first = asyncio.run(
        collect(
            CollectPlan(**{**plan.__dict__, "tasks": TASKS[:2]}),
            make_env=lambda: make_env("shop"),
            policy=_greeter(),
            sink=store,
            families=families,
        )
    )
    assert (first.planned, first.skipped, first.ran) == (6, 0, 6)

    seen: list[str] = []
    second = asyncio.run(
        collect(
            plan,
            make_env=lambda: make_env("shop"),
            policy=_greeter(),
            sink=store,
            families=families,
            on_episode=lambda ep: seen.append(str(ep.task)),
        )
    )
    assert (second.planned, second.skipped, second.ran) == (12, 6, 6)
    assert sorted(set(seen)) == sorted(TASKS[2:])

    rows = store.episodes(run_id)
    assert len(rows) == 12
    assert {(r.task_id, r.sample) for r in rows} == {(t, s) for t in TASKS for s in range(3)}
    assert {r.task_family for r in rows} == set(families.values())
    assert all(r.turns == 2 and r.termination == "max_turns" and r.reward == 0.0 for r in rows)
    assert all(r.messages[0]["role"] == "system" for r in rows)

    third = asyncio.run(
        collect(plan, make_env=lambda: make_env("shop"), policy=_greeter(), sink=store, families=families)
    )
    assert third.ran == 0 and third.skipped == 12


def test_summarize_pass_rates() -> None:
    def row(fam: str, success: bool, turns: int, term: str = "done") -> SimpleNamespace:
        return SimpleNamespace(
            task_family=fam, env="shop", success=success, reward=1.0 if success else 0.25, turns=turns, termination=term
        )

    fams, terms = summarize([row("a", True, 2), row("a", False, 4, "max_turns"), row("b", False, 6, "endpoint_error")])
    by = {f.family: f for f in fams}
    assert by["a"].pass_rate == 0.5 and by["a"].mean_turns == 3.0 and by["a"].mean_reward == pytest.approx(0.625)
    assert by["b"].pass_rate == 0.0 and by["b"].episodes == 1
    assert terms == {"done": 1, "max_turns": 1, "endpoint_error": 1}


def test_endpoint_policy_through_collector(store: Store) -> None:
    with FakeOpenAIServer(lambda _r: tool_call_message("find_customer_by_email", {"email": "x@example.com"})) as srv:
        policy = ChatModelPolicy(
            make_chat_model(EndpointConfig(base_url=srv.base_url, model="fake", max_retries=0)), name="fake"
        )
        run_id = store.create_run("rollouts", {})
        plan = CollectPlan(run_id=run_id, env="shop", tasks=TASKS[:2], samples=2, concurrency=4, max_turns=3)
        res = asyncio.run(collect(plan, make_env=lambda: make_env("shop"), policy=policy, sink=store))
        assert res.ran == 4
        assert srv.request_count == 4 * 3
    ep = store.episodes(run_id)[0]
    tool_msgs = [m for m in ep.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 3 and all(m["name"] == "find_customer_by_email" for m in tool_msgs)


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GAPFORGE_WORKSPACE": str(ws)}
    return subprocess.run(
        [sys.executable, "-m", "gapforge.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_kill_halfway_then_resume_yields_exact_count(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    tasks = ",".join(make_env("shop").task_ids()[:8])
    with FakeOpenAIServer(
        lambda _r: tool_call_message("get_product_details", {"product_id": "nope"}), latency_s=0.15
    ) as srv:
        args = [
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            srv.base_url,
            "--samples",
            "2",
            "--concurrency",
            "2",
            "--tasks",
            tasks,
            "--set",
            "rollouts.max_turns=2",
        ]
        env = {**os.environ, "GAPFORGE_WORKSPACE": str(ws)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gapforge.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        db = ws / "gapforge.db"
        deadline = time.monotonic() + 60
        stored = 0
        while time.monotonic() < deadline:
            if db.exists():
                with Store(f"sqlite:///{db}") as s:
                    runs = s.list_runs()
                    stored = len(s.episodes(runs[0].id)) if runs else 0
                if stored >= 4:
                    break
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
        assert 4 <= stored < 16, f"kill came too late or never: {stored} stored"
        run_id = run_id_in(out)
        assert run_id.startswith("r-")

        res = _cli(ws, *args, "--run", run_id)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.strip().splitlines()
        assert lines[0] == f"run {run_id}" and lines[-1] == f"run {run_id}"
        assert "already stored" in res.stdout
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as s:
        rows = s.episodes(run_id)
    assert len(rows) == 16
    assert len({(r.task_id, r.sample) for r in rows}) == 16


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--env", "nosuchenv", "--policy", "scripted"], "unknown env"),
        (["--env", "shop", "--policy", "scripted", "--tasks", "shop-nope-999"], "unknown task id"),
        (["--env", "shop", "--policy", "http://127.0.0.1:9/v1"], "unreachable"),
        (["--env", "shop", "--policy", "/definitely/not/here"], "--policy"),
    ],
)
def test_collect_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["rollouts", "collect", *args, "--set", f"workspace={tmp_path}"])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output


def test_show_lists_and_prints_trajectory(tmp_path: Path) -> None:
    answers = tmp_path / "a.yaml"
    answers.write_text('policy:\n  repeat: "Hello there"\n')
    runner = CliRunner()
    base = ["--set", f"workspace={tmp_path}"]
    res = runner.invoke(
        app,
        [
            "rollouts",
            "collect",
            "--env",
            "shop",
            "--policy",
            f"scripted:{answers}",
            "--tasks",
            "shop-lookup-001",
            "--set",
            "rollouts.max_turns=2",
            *base,
        ],
    )
    assert res.exit_code == 0, res.output
    run_id = run_id_in(res.output)
    listing = runner.invoke(app, ["rollouts", "show", run_id, *base])
    assert listing.exit_code == 0 and "shop-lookup-001" in listing.output
    with Store(f"sqlite:///{tmp_path / 'gapforge.db'}") as s:
        eid = s.episodes(run_id)[0].id
    one = runner.invoke(app, ["rollouts", "show", run_id, "--episode", str(eid), *base])
    assert one.exit_code == 0
    assert "Hello there" in one.output and "termination=max_turns" in one.output
    missing = runner.invoke(app, ["rollouts", "show", "r-nope", *base])
    assert missing.exit_code == 2 and "unknown run" in missing.output


def test_episodes_finishing_together_are_committed_together_and_counted_once_each(store: Store) -> None:
    calls: list[int] = []

    class CountingSink:
        def episode_keys(self, run_id, env):
            return store.episode_keys(run_id, env)

        def add_episode(self, *a, **kw):  # never used when add_episodes exists
            raise AssertionError("one transaction per episode")

        def add_episodes(self, run_id, env, items):
            calls.append(len(items))
            time.sleep(0.05)  # a slow commit: episodes finishing meanwhile queue for the next one
            return store.add_episodes(run_id, env, items)

    run_id = store.create_run("rollouts", {})
    store.put_episode(
        run_id,
        "shop",
        TASKS[0],
        0,
        policy="elsewhere",
        messages=[],
        reward=0.0,
        success=False,
        components={},
        termination="done",
        error=None,
        turns=0,
        timings={},
    )  # stored by "another process" meanwhile
    plan = CollectPlan(run_id=run_id, env="shop", tasks=TASKS, samples=4, concurrency=16, max_turns=1)
    sink = CountingSink()
    real_keys = sink.episode_keys
    sink.episode_keys = lambda r, e: set()  # the collector did not see that row when it planned: it plays the key again
    res = asyncio.run(collect(plan, make_env=lambda: make_env("shop"), policy=_greeter(), sink=sink))
    assert (res.planned, res.ran, res.stored_elsewhere) == (16, 15, 1)
    assert sum(calls) == 16 and len(calls) < 16  # grouped: fewer transactions than episodes
    assert len(res.episode_ids) == len(set(res.episode_ids)) == 15
    assert len(store.episodes(run_id)) == 16 and real_keys(run_id, "shop") == set(plan.keys())
