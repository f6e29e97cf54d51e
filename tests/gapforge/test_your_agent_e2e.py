"""Your own agent, end to end: a target env class defined outside the package (tests/data/library_desk) and the
MCP example (examples/helpdesk) go through `gapforge` as a user runs it, with stand-ins only where this machine
has no model: the policy is the tiny local model (`tiny_model_dir`), the LLM roles answer from a local
OpenAI-compatible server (tests.fakes.fake_openai) by rules: discovery names one capability, labeling marks failures
LACKING and successes PRESENT, the generator answers with a synthetic env module under tests/data/ written against
envs/sdk.py (its tools share names, parameters and result keys with the target's), the reviewer accepts.
Every stage after them is real: episodes, analysis statistics, the Docker sandbox's self-test, GRPO + LoRA,
the router, evaluation on the held-out split, the report. Measured on 2 shared cores: 67 s (the class), 58 s (MCP: collect,
then each stage's command), 26 s (MCP: `gapforge run`); about three times that under a load of 10."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_id_in

from gapforge.evaluation.run import child_run_id
from gapforge.store import Store
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.gapforge.dryrun_roles import prompt_text
from tests.prompts.test_prompts_any_target import SHOP_WORDS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
LIBRARY = DATA / "library_desk"
LIBRARY_SPEC = f"{LIBRARY / 'library_env.py'}:LibraryDeskEnv"
LIBRARY_TOOLS = ("get_loan", "renew_loan", "search_catalog")
pytestmark = pytest.mark.slow

SMALL = [  # every stage small (as tests/gapforge/test_gpu_dryrun.py), everything else the config's defaults
    "rollouts.samples=2",
    "rollouts.concurrency=4",
    "rollouts.max_turns=3",
    "policy.max_new_tokens=16",
    "analysis.passes=2",
    "analysis.min_passes=2",
    "analysis.min_capabilities=1",
    "analysis.bootstrap=20",
    "analysis.concurrency=4",
    "synthesis.max_attempts=1",
    "synthesis.validation_seeds=6",
    "synthesis.rollout_budget=8",
    # a random tiny policy scores near the floor on every seed: readiness cannot pass with the defaults (real models: leave them)
    "grpo_readiness.groups=2",
    "grpo_readiness.samples=2",
    "grpo_readiness.min_informative=0",
    "grpo_readiness.max_all_zero=1",
    "grpo_readiness.max_all_perfect=1",
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
    "evaluation.comparisons=[]",
]


class Roles:
    """The LLM roles' rules for one capability whose synthetic env is `module` (see the module docstring)."""

    def __init__(self, capability: str, definition: str, module: Path) -> None:
        self.capability, self.definition, self.module = capability, definition, module

    @staticmethod
    def _answer(req: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        if req.get("tools"):  # function-calling structured output
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": req["tools"][0]["function"]["name"], "arguments": json.dumps(obj)},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": json.dumps(obj)}

    def __call__(self, req: dict[str, Any]) -> dict[str, Any]:
        fmt = (req.get("response_format") or {}).get("json_schema") or {}
        schema = fmt.get("schema") or ((req.get("tools") or [{}])[0].get("function") or {}).get("parameters") or {}
        keys, text = set(schema.get("properties") or {}), prompt_text(req)
        if "capabilities" in keys:
            ids = [int(i) for i in re.findall(r"^### episode (\d+)$", text, flags=re.M)]
            return self._answer(
                req,
                {
                    "capabilities": [
                        {"name": self.capability, "definition": self.definition, "example_episode_ids": ids[:2]}
                    ]
                },
            )
        if "labels" in keys:
            failed = "outcome: FAILURE" in text
            label = {
                "capability": self.capability,
                "label": "LACKING" if failed else "PRESENT",
                "evidence": "[1] "
                + ("acted or answered without reading the record first" if failed else "read the record first"),
                "message_index": 1,
            }
            return self._answer(req, {"labels": [label]})
        if "code" in keys:
            return self._answer(req, {"code": self.module.read_text(), "notes": "an env for this capability"})
        if "verdict" in keys:
            return self._answer(
                req,
                {
                    "capability_focus": True,
                    "tools_match": True,
                    "reward_gameable": False,
                    "verdict": "accept",
                    "problems": [],
                    "fixes": [],
                },
            )
        raise AssertionError(f"an LLM request this test does not expect: {text[:300]}")


def gapforge(
    args: list[str], workspace: Path, llm_url: str | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """One `gapforge` command as a user runs it (its own process), in the repository root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "GAPFORGE_WORKSPACE": str(workspace)}
    if llm_url:
        env["GAPFORGE_LLM_BASE_URL"] = llm_url
    return subprocess.run(
        [sys.executable, "-m", "gapforge.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_args(spec: str, tiny_model_dir: Path, image: str, *extra: str) -> list[str]:
    sets = [
        f"rollouts.env={spec}",
        "llm.kind=openai",
        "llm.endpoint.model=stand-in",
        "policy.kind=local",
        f"policy.local_path={tiny_model_dir}",
        f"sandbox.image={image}",
        *SMALL,
        *extra,
    ]
    return ["run", *[a for s in sets for a in ("--set", s)]]


@pytest.fixture(scope="module")
def sandbox_image(docker_client) -> str:
    from gapforge.sandbox.image import build_image, image_is_current

    tag = "gapforge-sandbox:latest"
    if not image_is_current(docker_client, tag):
        build_image(docker_client, tag, method="local-python")
    return tag


def assert_whole_run(workspace: Path, spec: str, capability: str, tools: tuple[str, ...], out: str) -> str:
    """The run is done, records the target, retained the capability, validated its env, trained its adapter and evaluated
    base and routed TRACE on the held-out tasks of this target; the report names the target. Returns the run id."""
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        (run,) = [r for r in store.list_runs() if r.kind == "trace"]
        assert run.status == "done", out[-3000:]
        target = store.run_target(run.id)
        assert target["spec"] == spec and target["tool_names"] == list(tools) and len(target["tools_sha256"]) == 64
        assert [c.name for c in store.capabilities(run.id) if c.retained] == [capability]
        assert {(e.capability, e.status) for e in store.synthetic_envs(run.id)} == {(capability, "accepted")}
        assert {a.name: a.status for a in store.adapters(run.id)} == {capability: "done"}
        heldout = set(store.get_split(run.id).heldout_tasks)
        assert heldout, "no held-out tasks"
        evaluated = {e.name.removeprefix("eval:") for e in store.evaluations(run.id)}
        assert {"base", "trace_routed"} <= evaluated, evaluated
        for name in ("base", "trace_routed"):
            assert {ep.task_id for ep in store.episodes(child_run_id(run.id, name))} == heldout, name
    checkpoints = sorted((workspace / "adapters" / run.id / capability / "trl").glob("checkpoint-*"))
    assert [p.name for p in checkpoints] == ["checkpoint-2"] and (
        checkpoints[0] / "adapter_model.safetensors"
    ).is_file()
    report = (workspace / "reports" / run.id / "report.md").read_text()
    assert f"Env `{spec}`" in report, report[:500]
    return run.id


def assert_prompts_name_the_target(requests: list[dict[str, Any]], tools: tuple[str, ...], domain: str) -> None:
    """Every role prompt names this target's domain and tools; none carries shop wording (the SDK's example module,
    labelled as another target's code, aside)."""
    texts = [prompt_text(r) for r in requests]
    assert len(texts) >= 4  # discovery, 2 labeling passes, generator, reviewer
    example = re.compile(r"## An example module.*?```python.*?```", re.S)
    for text in texts:
        assert domain in text, text[:400]
        assert all(t in text for t in tools if t != "search_catalog" or "### episode" in text), text[:400]
        assert not SHOP_WORDS.findall(example.sub("", text)), sorted(set(SHOP_WORDS.findall(example.sub("", text))))


def test_a_users_env_class_goes_through_the_whole_run(tmp_path: Path, tiny_model_dir: Path, sandbox_image: str) -> None:
    workspace = tmp_path / "ws"
    roles = Roles(
        "renewal_eligibility_check",
        "Before renewing a loan the agent reads it and checks the library's rules "
        "(no reservation by another reader, under the renewal limit); it refuses with the reason when a rule fails.",
        LIBRARY / "renewal_check_env.py",
    )
    with FakeOpenAIServer(roles) as llm:
        done = gapforge(run_args(LIBRARY_SPEC, tiny_model_dir, sandbox_image), workspace, llm.base_url)
        requests = list(llm.requests)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert_whole_run(workspace, LIBRARY_SPEC, roles.capability, LIBRARY_TOOLS, out)
    assert_prompts_name_the_target(requests, ("get_loan", "renew_loan"), "Riverside Public Library")


HELPDESK_SPEC = "mcp:examples/helpdesk/target.yaml"  # as a user types it in the repository root
NEEDS_MCP = pytest.mark.skipif(
    importlib.util.find_spec("mcp") is None, reason="the MCP target needs the mcp extra: pip install 'gapforge[mcp]'"
)
HELPDESK_TOOLS = (
    "find_employee",
    "get_account",
    "list_groups",
    "list_tickets",
    "get_ticket",
    "verify_identity",
    "reset_password",
    "unlock_account",
    "add_to_group",
    "create_ticket",
)
FEW = ["pw-001", "pw-002", "ul-001", "ul-002", "ga-001", "ga-002", "rf-001", "rf-002"]  # two tasks of each family
UNLOCK = Roles(
    "unlock_precondition_check",
    "Before unlocking an account the agent verifies the caller and reads the account; it "
    "unlocks only a failed-logins lock and refuses a security hold or an ended contract with the ticket the policy wants.",
    DATA / "helpdesk_synth" / "unlock_precondition_env.py",
)


def never_refuse(req: dict[str, Any]) -> dict[str, Any]:
    """The help desk's planted failure as a policy endpoint: verifies, then always does what the caller asks (tests/data/mcp_policies.py)."""
    import asyncio

    from gapforge.envs.protocol import Message, ToolCall
    from tests.data.mcp_policies import PlanPolicy

    messages = [
        Message(
            role=m["role"],
            content=m.get("content"),
            tool_call_id=m.get("tool_call_id"),
            name=m.get("name"),
            tool_calls=[
                ToolCall(
                    id=c["id"], name=c["function"]["name"], arguments=json.loads(c["function"]["arguments"] or "{}")
                )
                for c in m.get("tool_calls") or []
            ],
        )
        for m in req["messages"]
    ]
    return asyncio.run(PlanPolicy("never_refuse").respond(messages, req.get("tools") or [])).to_openai()


@NEEDS_MCP
def test_the_mcp_example_collects_and_every_stage_runs_on_its_episodes(
    tmp_path: Path, tiny_model_dir: Path, sandbox_image: str
) -> None:
    """`rollouts collect` on the MCP example with a policy endpoint that never refuses (5 of 8 tasks pass), then each stage's
    own command on that run with the tiny local policy: analyze, synthesize (the self-test compares result formats with the
    MCP server's stored results), train, evaluate, report."""
    workspace = tmp_path / "ws"
    with FakeOpenAIServer(never_refuse) as endpoint:
        collected = gapforge(
            [
                "rollouts",
                "collect",
                "--env",
                HELPDESK_SPEC,
                "--policy",
                endpoint.base_url,
                "--tasks",
                ",".join(FEW),
                "--concurrency",
                "4",
            ],
            workspace,
        )
    assert collected.returncode == 0, (collected.stdout + collected.stderr)[-3000:]
    run_id = run_id_in(collected.stdout)
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        episodes = store.episodes(run_id)
        assert store.run_target(run_id)["tool_names"] == list(HELPDESK_TOOLS)
    assert sorted(e.task_id for e in episodes) == sorted(FEW) and {e.env for e in episodes} == {HELPDESK_SPEC}
    assert sorted(e.task_id for e in episodes if not e.success) == [
        "ga-002",
        "rf-001",
        "rf-002",
    ]  # the refusals the policy requires
    assert all(e.reward == float(e.success) for e in episodes)  # reward: all -> 1.0 iff every check passed

    stage_sets = run_args(HELPDESK_SPEC, tiny_model_dir, sandbox_image)[1:]
    with FakeOpenAIServer(UNLOCK) as llm:
        for command in (
            ["analyze", run_id],
            ["synthesize", run_id],
            ["train", run_id],
            ["evaluate", run_id],
            ["report", run_id],
        ):
            t0 = time.perf_counter()
            done = gapforge([*command, *stage_sets], workspace, llm.base_url)
            print(f"gapforge {command[0]}: {time.perf_counter() - t0:.1f} s")
            assert done.returncode == 0, f"{command[0]}: " + (done.stdout + done.stderr)[-3000:]
        requests = list(llm.requests)
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        assert [c.name for c in store.capabilities(run_id) if c.retained] == [UNLOCK.capability]
        (env,) = store.synthetic_envs(run_id)
        assert env.status == "accepted"
        checks = {c["name"]: c["verdict"] for c in store.get_validation(env.id).report["report"]["checks"]}
        assert (
            checks["result_format"] == "PASS" and checks["contamination"] == "PASS" and checks["fidelity"] == "PASS"
        ), checks
        assert {a.name: a.status for a in store.adapters(run_id)} == {UNLOCK.capability: "done"}
        heldout = set(store.get_split(run_id).heldout_tasks)
        for name in ("base", "trace_routed"):
            assert {ep.task_id for ep in store.episodes(child_run_id(run_id, name))} == heldout, name
    assert f"Env `{HELPDESK_SPEC}`" in (workspace / "reports" / run_id / "report.md").read_text()
    assert_prompts_name_the_target(requests, ("verify_identity", "get_account", "unlock_account"), "Northwind")


@NEEDS_MCP
def test_a_whole_run_on_the_mcp_example_reaches_the_report(
    tmp_path: Path, tiny_model_dir: Path, sandbox_image: str
) -> None:
    """`gapforge run` on the MCP example with the tiny random policy: it passes no task, so no capability has a success
    to contrast with (ER+ undefined) and none is retained; the run still evaluates the base on the held-out tasks and reports."""
    workspace = tmp_path / "ws"
    with FakeOpenAIServer(UNLOCK) as llm:
        done = gapforge(
            run_args(
                HELPDESK_SPEC, tiny_model_dir, sandbox_image, "rollouts.samples=1", f"rollouts.tasks=[{','.join(FEW)}]"
            ),
            workspace,
            llm.base_url,
        )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        (run,) = [r for r in store.list_runs() if r.kind == "trace"]
        assert run.status == "done" and store.run_target(run.id)["spec"] == HELPDESK_SPEC
        episodes = store.episodes(run.id)
        assert sorted(e.task_id for e in episodes) == sorted(FEW) and not any(e.success for e in episodes)
        assert not [c for c in store.capabilities(run.id) if c.retained]
        heldout = set(store.get_split(run.id).heldout_tasks)
        assert {ep.task_id for ep in store.episodes(child_run_id(run.id, "base"))} == heldout
    assert f"Env `{HELPDESK_SPEC}`" in (workspace / "reports" / run.id / "report.md").read_text()
