"""The paper's protocol as configs (configs/paper-tau2.yaml, configs/paper-toolsandbox.yaml).

Always on: each config validates against the config tree and carries the paper's values (a test fails when one is
edited away: the model, the user simulator, the joint airline + retail target, the 50-step cap, all tasks greedy x 1,
1,280 training rollouts per adapter, ToolSandbox's 129 base scenarios).

Opt-in (GAPFORGE_PAPER_DRYRUN=1, ~minutes, needs Docker; ToolSandbox's also its venv): each config's dry run on CPU
stand-ins, as the GPU dry run (test_gpu_dryrun.py) runs docs/gpu.md. Overridden, only what CPU needs: the policy is a
tiny Qwen3-architecture model served by the vLLM stand-in (tests.fakes.vllm_standin, with `--max-model-len 48`: it caps
a request that sends no max_tokens, as τ²'s user simulator's do), the LLM roles answer from a fake OpenAI server
(tests/gapforge/dryrun_roles.py), every stage is small (a few tasks, two GRPO steps), and the τ² run's user simulator is
the fake server (a random tiny model never ends a conversation, so nothing would succeed and the analysis would find no
gap); a second step then collects one τ² episode with the config's own user simulator — the policy endpoint, here a fake
server that plays both the policy and a user who never stops — which τ²'s 50-step cap ends. Everything else is the
config's: every stage runs to the report.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gapforge.config import load_config
from gapforge.envs.composite import parse_composite
from gapforge.envs.loader import parse_keywords
from gapforge.envs.user_endpoint import coerce_endpoint
from gapforge.errors import UsageError
from gapforge.wiring import user_simulator_endpoint

ROOT = Path(__file__).resolve().parents[2]
TAU2, TOOLSANDBOX = ROOT / "configs" / "paper-tau2.yaml", ROOT / "configs" / "paper-toolsandbox.yaml"
PAPER_MODEL = "Qwen/Qwen3-30B-A3B-Instruct-2507"
DRY = pytest.mark.skipif(
    os.environ.get("GAPFORGE_PAPER_DRYRUN") != "1",
    reason="opt-in: GAPFORGE_PAPER_DRYRUN=1 runs the paper configs on CPU stand-ins (minutes, needs Docker)",
)


def _cfg(path: Path, *overrides: str) -> Any:
    return load_config(path, list(overrides), environ={})


def _budget(cfg: Any) -> int:
    return cfg.training.max_steps * cfg.training.groups_per_step * cfg.training.num_generations


@pytest.mark.parametrize("path", [TAU2, TOOLSANDBOX], ids=["tau2", "toolsandbox"])
def test_the_config_validates_and_carries_the_shared_paper_settings(path: Path) -> None:
    cfg = _cfg(path)
    assert cfg.policy.kind == "endpoint" and cfg.policy.endpoint.model == PAPER_MODEL
    assert _budget(cfg) == 1280 and 4 * _budget(cfg) == 5120  # 5,120 rollouts over 4 adapters
    t = cfg.training
    assert (t.lora_rank, t.learning_rate, t.temperature, t.max_steps, t.early_stopping) == (32, 1e-5, 1.0, 40, False)
    a = cfg.analysis
    assert (a.delta, a.rho, a.passes) == (0.20, 0.10, 10)
    assert set(cfg.evaluation.comparisons) == {"paper_protocol", "baseline_grpo_target"} and cfg.routing.enabled
    assert cfg.rollouts.user == "llm"


def test_tau2_is_airline_and_retail_as_one_target_with_a_50_step_cap_and_the_policy_as_user() -> None:
    cfg = _cfg(TAU2)
    parts = parse_composite(cfg.rollouts.env)
    assert [(prefix, spec.partition("?")[0]) for prefix, spec in parts] == [
        ("airline", "tau2:airline"),
        ("retail", "tau2:retail"),
    ]
    assert all(parse_keywords(spec.partition("?")[2], spec) == {"max_steps": 50} for _, spec in parts)
    assert cfg.rollouts.user_endpoint == "policy"
    user = user_simulator_endpoint(cfg)
    assert (user.model, user.base_url) == (PAPER_MODEL, cfg.policy.endpoint.base_url)
    assert coerce_endpoint(user, "tau2 user simulator").temperature == 0.0  # what τ²'s user simulator samples at


@pytest.mark.tau2
def test_tau2_targets_user_simulator_and_baseline_talk_to_the_policy() -> None:
    pytest.importorskip("tau2")
    from gapforge.stages.training import baseline_job
    from gapforge.wiring import make_target_env_factory

    cfg = _cfg(TAU2)
    probe, _ = make_target_env_factory(cfg, cfg.rollouts.env)
    try:
        assert {p: (e.max_steps, e.endpoint.model, e.endpoint.base_url) for p, e in probe.parts.items()} == {  # type: ignore[attr-defined]
            "airline": (50, PAPER_MODEL, "http://localhost:8000/v1"),
            "retail": (50, PAPER_MODEL, "http://localhost:8000/v1"),
        }
        assert len(probe.task_ids()) == 50 + 114 and probe.max_turns == 50  # type: ignore[attr-defined]
    finally:
        probe.close()
    split = SimpleNamespace(
        env=cfg.rollouts.env, analysis_tasks=["airline/0", "airline/1", "retail/0", "retail/1", "retail/2"]
    )
    job = baseline_job(cfg, split, n_adapters=4, base_model="weights", out_dir="out", run_id=None)
    assert (
        job.env.user == "llm" and job.env.user_endpoint["model"] == PAPER_MODEL
    )  # GRPO on the target meets the same user


def test_the_policy_as_user_needs_a_served_policy() -> None:
    cfg = _cfg(TAU2, "policy.kind=local")
    with pytest.raises(
        UsageError, match=r"rollouts.user_endpoint=policy needs a served policy \(policy.kind=endpoint\)"
    ) as err:
        user_simulator_endpoint(cfg)
    assert "\n" not in str(err.value)


def test_toolsandbox_runs_the_129_base_scenarios() -> None:
    cfg = _cfg(TOOLSANDBOX)
    assert cfg.rollouts.env == "toolsandbox?network=stand-in"  # the 34 RapidAPI scenarios kept, with stand-in answers
    from gapforge.envs.toolsandbox.runtime import missing_reason

    if missing_reason() is not None:
        pytest.skip(str(missing_reason()))
    from gapforge.envs.registry import make_env

    env = make_env(cfg.rollouts.env)
    assert len(env.task_ids()) == 129
    env.close()


# ---- the dry runs (opt-in) ---------------------------------------------------------------------------------------------
TAU2_TASKS = [
    "airline/0",
    "airline/1",
    "airline/9",
    "retail/25",
    "retail/57",
    "retail/38",
    "retail/66",
]  # read-only ones and cancellations
TOOLSANDBOX_TASKS = [
    "find_current_city_insufficient_information",
    "find_days_till_holiday_insufficient_information",
    "get_wifi",
    "search_message_with_recency_latest",
]
SMALL = [
    "rollouts.samples=2",
    "rollouts.concurrency=4",
    "rollouts.max_turns=3",
    "policy.max_new_tokens=24",
    "analysis.passes=2",
    "analysis.min_passes=2",
    "analysis.min_capabilities=1",
    "analysis.bootstrap=20",
    "analysis.concurrency=4",
    "synthesis.max_attempts=1",
    "synthesis.validation_seeds=4",
    "synthesis.rollout_budget=8",
    "grpo_readiness.groups=2",
    "grpo_readiness.samples=2",
    "grpo_readiness.min_informative=0",
    "grpo_readiness.max_all_zero=1",
    "grpo_readiness.mean_low=0",
    "grpo_readiness.concurrency=2",
    "sandbox.pool_size=2",
    "training.max_steps=2",
    "training.groups_per_step=1",
    "training.num_generations=2",
    "training.max_turns=2",
    "training.max_new_tokens=16",
    "training.max_completion_length=512",
    "training.malformed_tool_calls=continue",
    "training.train_seeds=2",
    "training.heldout_seeds=1",
    "training.heldout_samples=1",
    "training.eval_every=2",
    "training.save_every=2",
    "evaluation.trials=1",
    "evaluation.routing_seeds=1",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sh(cmd: str, env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {cmd}\n")
        out.flush()
        done = subprocess.run(
            ["bash", "-c", cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600
        )
    assert done.returncode == 0, f"{cmd[:200]!r} failed ({done.returncode}); see {log}:\n" + log.read_text()[-3000:]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "dry-run"}


def _dry_run(tmp_path: Path, config: Path, tasks: list[str], extra: list[str], respond: Any) -> tuple[Any, str, float]:
    """docs/gpu.md's steps with `config` on CPU stand-ins; returns (its config, the run id, minutes)."""
    from tests.fakes.fake_openai import FakeOpenAIServer

    weights, workspace, log, port = tmp_path / "tiny-qwen3", tmp_path / "ws", tmp_path / "run.log", _free_port()
    py, model, env = sys.executable, "gapforge/tiny-qwen3", _env()
    served = [
        f"--set policy.endpoint.model={model}",
        f"--set policy.local_path={weights}",
        f"--set policy.endpoint.base_url=http://127.0.0.1:{port}/v1",
        f"--set workspace={workspace}",
    ]
    t0 = time.perf_counter()
    _sh(f"{py} -m gapforge.cli dev tiny-model {weights} --template qwen3", env, log)
    _sh(f"{py} -m gapforge.cli dev chat-template {weights} --out {weights}/gapforge_chat_template.jinja", env, log)
    _sh(f"{py} -m gapforge.cli sandbox build-image", env, log)
    server = subprocess.Popen(
        [
            py,
            "-m",
            "tests.fakes.vllm_standin",
            str(weights),
            "--served-model-name",
            model,
            "--chat-template",
            f"{weights}/gapforge_chat_template.jinja",
            "--enable-lora",
            "--max-loras",
            "8",
            "--max-lora-rank",
            "32",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--reasoning-parser",
            "qwen3",
            "--port",
            str(port),
            "--max-model-len",
            "48",
        ],
        cwd=ROOT,
        env={**env, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready = server.stdout.readline()  # type: ignore[union-attr]
        assert ready.startswith(f"serving {model} on "), ready
        with FakeOpenAIServer(respond) as llm:
            env["GAPFORGE_LLM_BASE_URL"] = llm.base_url
            sets = [
                *served,
                f"--set rollouts.tasks=[{','.join(repr(t) for t in tasks)}]",
                *(f"--set {shlex.quote(s)}" for s in [*SMALL, *extra]),
            ]
            _sh(f"{py} -m gapforge.cli run --config {config} " + " ".join(sets), env, log)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
    cfg = load_config(config, [f"workspace={workspace}"], environ={})
    from gapforge.store import Store

    with Store(cfg.store_url) as store:
        (run,) = [r for r in store.list_runs() if r.kind == "trace"]
    return cfg, run.id, (time.perf_counter() - t0) / 60


def _check_run(cfg: Any, run_id: str, n_tasks: int) -> dict[str, Any]:
    """Every stage to the report; both evaluations stored apart; the report has the paper's section."""
    from gapforge.evaluation.policies import GRPO_TARGET
    from gapforge.store import Store
    from tests.gapforge.dryrun_roles import CAPABILITY

    with Store(cfg.store_url) as store:
        run = store.get_run(run_id)
        assert run.status == "done"
        assert {a.name: a.status for a in store.adapters(run_id)} == {CAPABILITY: "done", GRPO_TARGET: "done"}
        rows = {e.name: e.metrics for e in store.evaluations(run_id)}
        for scope in ("eval", "all_tasks"):
            assert {f"{scope}:{p}" for p in ("base", "trace_routed", f"adapter:{CAPABILITY}", GRPO_TARGET)} <= set(
                rows
            ), sorted(rows)
        assert (
            rows["all_tasks:base"]["tasks"] == n_tasks and rows["all_tasks:base"]["episodes"] == n_tasks
        )  # every task, 1 trial
        assert rows["eval:base"]["tasks"] < n_tasks  # the held-out split only
    report = (Path(cfg.workspace) / "reports" / run_id / "report.md").read_text()
    assert "## Every task, greedy, 1 trial (the TRACE paper's protocol)" in report
    return rows | {"report": report}


def _policy_and_user(req: dict[str, Any]) -> dict[str, Any]:
    """One endpoint as the served policy and as τ²'s user on it: the policy's requests carry the agent's tools (it asks
    in words: a tool error would count toward τ²'s error cap), the user's carry none (it never ends the conversation)."""
    if req.get("tools"):
        return {"role": "assistant", "content": "Could you tell me more about your reservation?"}
    return {"role": "assistant", "content": "I still need help with my reservation."}


@DRY
@pytest.mark.tau2
@pytest.mark.slow
def test_paper_tau2_dry_run(tmp_path: Path) -> None:
    from gapforge.store import Store
    from tests.fakes.fake_openai import FakeOpenAIServer
    from tests.gapforge.dryrun_roles import respond

    cfg, run_id, minutes = _dry_run(tmp_path, TAU2, TAU2_TASKS, ["rollouts.user_endpoint=llm"], respond)
    print(f"\npaper τ² dry run: {minutes:.1f} min")
    _check_run(cfg, run_id, len(TAU2_TASKS))
    with Store(cfg.store_url) as store:
        episodes = store.episodes(run_id, env=cfg.rollouts.env)
        assert {e.task_id.split("/")[0] for e in episodes} == {"airline", "retail"} and any(e.success for e in episodes)
        assert all(e.task_family.split("/")[0] == e.task_id.split("/")[0] for e in episodes)
    # the config's own user simulator (the policy endpoint) and its 50-step cap, through `rollouts collect`
    with FakeOpenAIServer(_policy_and_user) as endpoint:
        _sh(
            f"{sys.executable} -m gapforge.cli rollouts collect --config {TAU2} --tasks airline/0 --samples 1 "
            f"--set workspace={cfg.workspace} --set policy.endpoint.base_url={endpoint.base_url}",
            _env(),
            tmp_path / "run.log",
        )
        users = [r for r in endpoint.requests if not r.get("tools")]
    assert users and {(r["model"], r.get("temperature")) for r in users} == {
        (PAPER_MODEL, 0.0)
    }  # the policy's base model, greedy
    with Store(cfg.store_url) as store:
        (other,) = [r for r in store.list_runs() if r.kind != "trace" and not r.id.startswith(run_id)]
        (episode,) = store.episodes(other.id, env=cfg.rollouts.env)
    assert episode.score_info["termination_reason"] == "max_steps" and episode.score_info["steps"] == 50, (
        episode.score_info
    )
    assert episode.turns == 25  # the user's first turn, then 24 x (agent, user), then the agent's 25th message: step 50


def _toolsandbox_respond(req: dict[str, Any]) -> dict[str, Any]:
    """dryrun_roles.respond, except ToolSandbox's user role (it has the end_conversation tool): it ends the conversation."""
    from tests.gapforge.dryrun_roles import respond

    if any((t.get("function") or {}).get("name") == "end_conversation" for t in req.get("tools") or []):
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "end_0", "type": "function", "function": {"name": "end_conversation", "arguments": "{}"}}
            ],
        }
    return respond(req)


@DRY
@pytest.mark.toolsandbox
@pytest.mark.slow
def test_paper_toolsandbox_dry_run(tmp_path: Path) -> None:
    from gapforge.envs.toolsandbox.runtime import missing_reason

    if missing_reason() is not None:
        pytest.skip(str(missing_reason()))
    cfg, run_id, minutes = _dry_run(tmp_path, TOOLSANDBOX, TOOLSANDBOX_TASKS, [], _toolsandbox_respond)
    print(f"\npaper ToolSandbox dry run: {minutes:.1f} min")
    rows = _check_run(cfg, run_id, len(TOOLSANDBOX_TASKS))
    assert "## ToolSandbox: perfect count and mean similarity" in rows["report"]
    assert (
        f"| base | all tasks, greedy, 1 trial | {round(rows['all_tasks:base']['pass_rate']['value'] * 4)} of 4 |"
        in rows["report"]
    )
