"""Synthesis attempts end to end, offline, in the Docker sandbox: recorded generator / reviewer
answers (the shop story), real static gate, real checks, real store. The attempts are driven by
the graph's own repair loop (graph/capability.py `repair`, through `gapforge.stages.synthesis`, as
`gapforge synthesize` runs it), whose nodes call the service's two steps (generate_attempt,
validate_stored_attempt)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from synth_fixtures import analysed_run, store_at

from gapforge.agents.deps import StageDeps
from gapforge.agents.scripted import ScriptedChatModel
from gapforge.agents.synthesis.recorded import synthesis_rules
from gapforge.agents.synthesis.service import SynthesisResult
from gapforge.config import GapforgeConfig
from gapforge.sandbox.pool import SandboxPool
from gapforge.stages import RunStages
from gapforge.stages.synthesis import synthesize_capability as repair_loop
from gapforge.store.workspace import Workspace

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftover_containers")]


class Killed(BaseException):
    """Stands in for a kill -9 / Ctrl-C in the middle of an attempt."""


def spy_model(prompts: list[tuple[str, str]], kill_at: str | None = None) -> ScriptedChatModel:
    """The recorded answers, noting every (prompt name, prompt text) asked; `kill_at` ("prompt:attempt")
    raises Killed when that prompt is asked for that attempt."""
    rules = synthesis_rules()

    def wrap(name: str) -> Any:
        def rule(messages: list, tools: list) -> Any:
            text = messages[-1].content
            if kill_at and kill_at.split(":")[0] == name and f"Attempt: {kill_at.split(':')[1]}" in text:
                raise Killed()
            prompts.append((name, text))
            return rules[name](messages, tools)

        return rule

    return ScriptedChatModel.from_dict({name: wrap(name) for name in rules})


def _no_pool() -> Any:
    raise AssertionError("no sandbox was needed: every verdict is stored")


def deps_for(store, tmp: Path, pool, sandbox_cfg, cfg, prompts, kill_at: str | None = None) -> StageDeps:
    """The one dependencies object over the test's store and pool (policy.kind scripted: no readiness rollouts)."""
    model = spy_model(prompts, kill_at)
    return StageDeps(
        open_store=lambda: store,
        open_pool=(lambda: pool) if pool is not None else _no_pool,
        policy_factory=lambda _cfg: None,
        chat_model_factory=lambda role: model,  # type: ignore[arg-type,return-value]
        sandbox=sandbox_cfg,
        synthesis=cfg,
        workspace=Workspace(tmp),
    )


def synthesize_capability(deps: StageDeps, run: str, capability: str) -> SynthesisResult:
    """The loop over the test's deps (policy.kind scripted: no readiness rollouts; N = deps.synthesis.max_attempts)."""
    return asyncio.run(repair_loop(RunStages(GapforgeConfig(), deps), run, capability))


def accepted_module_path(tmp: Path, run: str, capability: str) -> Path:
    return Workspace(tmp).synthetic_env(run, capability)


def test_attempt_one_fails_with_evidence_attempt_two_passes_hopeless_goes_unsynthesized(
    tmp_path, sandbox_cfg, synthesis_cfg
) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    prompts: list[tuple[str, str]] = []
    with SandboxPool(sandbox_cfg, size=1) as pool:
        deps = deps_for(store, tmp_path, pool, sandbox_cfg, synthesis_cfg, prompts)
        good = synthesize_capability(deps, run, "precondition_verification")
        hopeless = synthesize_capability(deps, run, "multi_step_task_completion")

    assert good.status == "accepted" and good.accepted_attempt == 2
    assert [a.failed_checks for a in good.attempts] == [["result_format"], []]
    path = accepted_module_path(tmp_path, run, "precondition_verification")
    assert (
        good.module_path == str(path)
        and path.read_text() == store.synthetic_envs(run, "precondition_verification")[1].code
    )

    rows = store.synthetic_envs(run, "precondition_verification")
    assert [(r.attempt, r.status) for r in rows] == [(1, "failed"), (2, "accepted")]
    assert rows[0].sha256 != rows[1].sha256 and rows[0].prompt_name == "synthesis_generator"
    first = store.get_validation(rows[0].id)
    assert first is not None and not first.passed
    result_format = next(c for c in first.report["report"]["checks"] if c["name"] == "result_format")
    assert result_format["verdict"] == "FAIL" and "['id', 'lines', 'state']" in result_format["summary"]
    assert store.get_validation(rows[1].id).passed
    # the review's tokens are counted where it ran (recorded answers: estimated at 4 characters a token)
    assert all((a.review is None) == (a.review_tokens == (0, 0)) for a in good.attempts)
    assert any(a.review_tokens[0] > 500 for a in good.attempts), [a.review_tokens for a in good.attempts]

    # the evidence went back to the generator: attempt 2's prompt carries attempt 1's failure
    generator_prompts = [text for name, text in prompts if name == "synthesis_generator"]
    assert "Attempt: 1 of 3" in generator_prompts[0] and "(first attempt)" in generator_prompts[0]
    assert "Attempt: 2 of 3" in generator_prompts[1] and "check `result_format` FAILED" in generator_prompts[1]
    assert "keys ['id', 'lines', 'state']" in generator_prompts[1]

    assert hopeless.status == "unsynthesized" and len(hopeless.attempts) == 3
    assert [a.stage for a in hopeless.attempts] == ["static_gate", "self_test", "review"]
    assert "reward_hacking" in hopeless.attempts[1].failed_checks
    assert hopeless.attempts[2].failed_checks == ["llm_review"]  # only the review caught the wrong capability
    assert "llm_review" in (hopeless.reason or "")
    assert not accepted_module_path(tmp_path, run, "multi_step_task_completion").exists()
    assert len(store.synthetic_envs(run, "multi_step_task_completion")) == 3


def test_a_kill_mid_validation_resumes_at_that_attempt_without_duplicates(tmp_path, sandbox_cfg, synthesis_cfg) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)

    with SandboxPool(sandbox_cfg, size=1) as pool:
        # killed during attempt 2's validation: after its sandbox checks, at the LLM review
        prompts: list[tuple[str, str]] = []
        with pytest.raises(Killed):
            synthesize_capability(
                deps_for(store, tmp_path, pool, sandbox_cfg, synthesis_cfg, prompts, "synthesis_reviewer:2"),
                run,
                "precondition_verification",
            )
        rows = store.synthetic_envs(run, "precondition_verification")
        assert [(r.attempt, r.status) for r in rows] == [(1, "failed"), (2, "generated")]
        assert store.get_validation(rows[1].id) is None

        again: list[tuple[str, str]] = []  # a fresh process: a new model, nothing in memory
        result = synthesize_capability(
            deps_for(store, tmp_path, pool, sandbox_cfg, synthesis_cfg, again), run, "precondition_verification"
        )

    assert result.status == "accepted" and result.accepted_attempt == 2
    assert [a.resumed for a in result.attempts] == [True, False]
    assert [name for name, _ in again] == ["synthesis_reviewer"]  # no new generator call: the stored code was validated
    rows = store.synthetic_envs(run, "precondition_verification")
    assert [(r.attempt, r.status) for r in rows] == [(1, "failed"), (2, "accepted")]
    assert all(store.get_validation(r.id) is not None for r in rows)

    # once decided, a re-run reads the store only: no model call, no sandbox (pool None, no image), same answer
    third: list[tuple[str, str]] = []
    no_sandbox = sandbox_cfg.model_copy(update={"image": "gapforge-no-such-image:none"})
    done = synthesize_capability(
        deps_for(store, tmp_path, None, no_sandbox, synthesis_cfg, third), run, "precondition_verification"
    )
    assert done.status == "accepted" and third == [] and all(a.resumed for a in done.attempts)


def test_a_kill_in_the_generator_call_regenerates_that_attempt(tmp_path, sandbox_cfg, synthesis_cfg) -> None:
    store = store_at(tmp_path)
    run = analysed_run(store)
    with SandboxPool(sandbox_cfg, size=1) as pool:
        with pytest.raises(Killed):
            synthesize_capability(
                deps_for(store, tmp_path, pool, sandbox_cfg, synthesis_cfg, [], "synthesis_generator:2"),
                run,
                "precondition_verification",
            )
        assert [r.attempt for r in store.synthetic_envs(run, "precondition_verification")] == [1]
        again: list[tuple[str, str]] = []
        result = synthesize_capability(
            deps_for(store, tmp_path, pool, sandbox_cfg, synthesis_cfg, again), run, "precondition_verification"
        )
    assert result.accepted_attempt == 2 and [n for n, _ in again] == ["synthesis_generator", "synthesis_reviewer"]
    assert (
        "Attempt: 2 of 3" in again[0][1] and "check `result_format` FAILED" in again[0][1]
    )  # feedback read back from the store
