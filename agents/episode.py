"""The episode loop: drive a PolicyModel through an Environment until done or a turn limit.

`run_episode(policy, env, task)` returns a `Rollout` (messages, reward, success,
components, the env's evidence — `score_info` and every non-empty `StepResult.info` —
turns, termination reason, timings, start time). A bad rollout is data: policy
failures (envs.errors.PolicyError: endpoint down after retries, malformed output)
and unexpected exceptions inside `env.step` end the episode with that reason,
and the episode is still scored. A sandbox lost to an outside cause (sandbox.errors.
SandboxError, after the sandbox's own retries) ends it as `sandbox_error`.
An exception in `env.score` is the env's too: the episode ends as `env_error` (reward 0.0 is
a placeholder, not a verdict; the error says so), unless the infrastructure had already ended it.
`endpoint_error` and `sandbox_error` are infrastructure failures
(INFRA_TERMINATIONS): not the model's or the env's doing, so the collector never
stores such an episode as final and a resume redoes it. Only `env.reset` raising envs.errors.EnvError
(unknown task: user input) and user-fixable model errors (e.g. a scripted model
out of answers) propagate. An env whose `done` is True right after reset (an episode
that ended before the agent's first turn) is scored at once, with 0 turns. The caller owns the env's lifecycle: run_episode never
calls `env.close()`.

This module imports no LangChain and no openai (contract in /.importlinter), so
training/ can drive episodes with the policy loop alone.
"""

from __future__ import annotations

import asyncio
import time
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envs.errors import INFRA_TERMINATIONS, EnvError, MalformedOutputError, PolicyError
from envs.protocol import Environment, Message, PolicyModel, TaskRef, ToolCall
from sandbox.errors import SandboxError

Termination = Literal["done", "max_turns", "endpoint_error", "sandbox_error", "malformed_output", "policy_error", "env_error"]
__all__ = ["INFRA_TERMINATIONS", "Rollout", "Termination", "run_episode"]  # INFRA_TERMINATIONS lives in envs.errors


class Rollout(BaseModel):
    """One rollout: a policy run on one task -- the trajectory, its score, the env's evidence and why it ended.

    (The stored form is store.models.Episode; the self-test's replayed action lists are
    sandbox.checks.probe.ReplayedEpisode.)
    """

    model_config = ConfigDict(extra="forbid")

    env: str
    task: str | int
    policy: str
    messages: list[Message]
    reward: float = Field(ge=0.0, le=1.0)
    success: bool
    components: dict[str, float] = Field(default_factory=dict)
    score_info: dict[str, Any] = Field(default_factory=dict)
    step_info: list[dict[str, Any]] = Field(
        default_factory=list, description="{'turn': n, 'info': StepResult.info} for every step whose info was not empty"
    )
    turns: int = Field(ge=0, description="assistant messages the policy produced")
    termination: Termination
    error: str | None = None
    timings: dict[str, float] = Field(description="policy_s, env_s, total_s")
    started_at: datetime

    @property
    def infrastructure_failure(self) -> bool:
        """Ended by the endpoint or the sandbox, not by the model or the env: not final."""
        return self.termination in INFRA_TERMINATIONS

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [tc for m in self.messages if m.role == "assistant" for tc in m.tool_calls]

    @property
    def user_prompt(self) -> str | None:
        """The user simulator's prompt `name@version` when the env reported one (Score.info['user_prompt'])."""
        value = self.score_info.get("user_prompt")
        return value if isinstance(value, str) else None


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def call_env(env: Any, executor: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, a blocking call of `env`: on the event loop itself when the env declares `inline = True` (fast
    CPU-only envs: a worker-thread hop costs more than the call), else on `executor` in a copy of the caller's
    context (as asyncio.to_thread does)."""
    if getattr(env, "inline", False) is True:
        return fn(*args)
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


async def run_episode(
    policy: PolicyModel, env: Environment, task: TaskRef, *, max_turns: int = 30, temperature: float | None = None,
    executor: Executor | None = None,
) -> Rollout:
    """Reset, then policy.respond -> env.step until done or `max_turns` (raised to `env.max_turns` where the env has one), then score.

    Blocking env calls run on `executor` (default: asyncio's default executor), or on
    the event loop itself when the env declares `inline = True`.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    env_turns = getattr(env, "max_turns", None)  # an env with its own step limit (τ²) is never cut before it
    if isinstance(env_turns, int) and env_turns > max_turns:
        max_turns = env_turns
    started_at = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    clock = {"policy_s": 0.0, "env_s": 0.0}

    async def env_call(fn: Callable[..., Any], *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return await call_env(env, executor, fn, *args)
        finally:
            clock["env_s"] += time.perf_counter() - t

    messages: list[Message] = []
    step_info: list[dict[str, Any]] = []
    turns = 0
    termination: Termination = "max_turns"
    error: str | None = None
    try:
        messages = list(await env_call(env.reset, task))  # EnvError (bad task) propagates
        tools = await env_call(env.tools)
    except EnvError:
        raise
    except SandboxError as e:
        termination, error = "sandbox_error", f"sandbox lost at env.reset: {_text(e)}"
    except Exception as e:
        termination, error = "env_error", f"env.reset failed: {_text(e)}"
    else:
        if getattr(env, "done", False) is True:  # ended inside reset (τ²: the user stopped at once, max_steps=1)
            termination = "done"
            max_turns = 0
        while turns < max_turns:
            t = time.perf_counter()
            try:
                reply = await policy.respond(messages, tools, temperature=temperature)
            except PolicyError as e:
                termination, error = e.termination, str(e)  # type: ignore[assignment]
                if isinstance(e, MalformedOutputError) and e.raw:
                    messages.append(Message.assistant(content=e.raw))  # what the model said, for analysis
                break
            finally:
                clock["policy_s"] += time.perf_counter() - t
            messages.append(reply)
            turns += 1
            try:
                result = await env_call(env.step, reply)
            except SandboxError as e:
                termination, error = "sandbox_error", f"sandbox lost at env.step: {_text(e)}"
                break
            except Exception as e:
                termination, error = "env_error", f"env.step failed: {_text(e)}"
                break
            messages.extend(result.messages)
            if result.info:
                step_info.append({"turn": turns, "info": dict(result.info)})
            if result.done:
                termination = "done"
                break

    reward, success, components, score_info = 0.0, False, {}, {}
    try:
        score = await env_call(env.score)
        reward, success, components, score_info = score.reward, score.success, dict(score.components), dict(score.info)
    except Exception as e:  # the env's code failed to score: its boundary, not a 0-reward verdict on the model
        score_info = {"score_error": _text(e)}
        if termination not in INFRA_TERMINATIONS:  # an infrastructure end stays one (not final: a resume redoes it)
            termination = "env_error"
        error = f"{error}; " if error else ""
        error += f"env.score failed: {_text(e)}"

    clock["total_s"] = time.perf_counter() - t0
    return Rollout(
        env=env.name, task=task, policy=policy.name, messages=messages, reward=reward, success=success,
        components=components, score_info=score_info, step_info=step_info, turns=turns, termination=termination,
        error=error, timings=clock, started_at=started_at,
    )

