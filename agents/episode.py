"""The episode loop: drive a PolicyModel through an Environment until done or a turn limit.

`run_episode(policy, env, task)` returns an `EpisodeRecord` (messages, reward, success, components, the env's evidence:
`score_info` and every non-empty `StepResult.info`, turns, termination, timings, start time); the terminations are
tabled in agents/README.md. A bad rollout is data: a policy failure (envs.errors.PolicyError) or an exception in
`env.step` ends the episode, which is still scored; an exception in `env.score` makes it `env_error` (reward 0.0 is a
placeholder, not a verdict) unless the infrastructure had already ended it; an episode whose `env.reset` raised is not
scored. The env's own exceptions keep a ValidationError's detail and the file:line of the env's code that raised
(`env_error_text`); so does a reset, step or score that returns the wrong type. Infrastructure ends (INFRA_TERMINATIONS,
among them an endpoint's or the sandbox's failure raised inside an env call, such as an LLM user simulator's endpoint
down past its retries) are never stored as final: a resume redoes them. Only
`env.reset` raising EnvError (unknown task) and user-fixable model errors propagate. An env done right after reset is
scored at once, with 0 turns. The caller owns the env's lifecycle: run_episode never calls `env.close()`.

Time limit: with `timeout_s` (from `deadline`, a `time.monotonic()` instant, when the caller started the clock earlier)
every env and policy call is awaited at most until the deadline; one that does not return ends the episode as
`timeout` and is abandoned (env calls run on daemon threads, envs.env_threads). It is not scored (the env may still be
inside the stuck call); `score_info["timeout"]` names the boundary waited on (`env`, `sandbox`, `policy`). A timeout is
not final. Only gapforge's built-in envs may run `inline` on the event loop (envs.env_threads.runs_inline).
Imports no LangChain and no openai (/.importlinter), so training/ can drive episodes with the policy loop alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sysconfig
import time
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gapforge.envs.env_threads import DaemonThreads, boundary_of, runs_inline
from gapforge.envs.errors import INFRA_TERMINATIONS, EnvError, MalformedOutputError, PolicyError
from gapforge.envs.protocol import Environment, Message, PolicyModel, TaskRef, ToolCall, returned
from gapforge.faults import EndpointFault, GapforgeError, SandboxFault
from gapforge.sandbox.errors import SandboxError

Termination = Literal[
    "done",
    "max_turns",
    "endpoint_error",
    "sandbox_error",
    "worker_error",
    "malformed_output",
    "policy_error",
    "env_error",
    "timeout",
]
__all__ = ["INFRA_TERMINATIONS", "EpisodeRecord", "Termination", "call_env", "run_episode", "timed_out"]

ENV_THREADS = DaemonThreads("env")  # env calls of callers that pass no executor (abandonable: envs.env_threads)
WAITED_ON = {"env": "the env's own code", "sandbox": "the sandbox", "policy": "the policy's endpoint or model"}
WAITED_ON["worker"] = "a local rollout worker process"


class EpisodeRecord(BaseModel):
    """One rollout: a policy run on one task -- the trajectory, its score, the env's evidence and why it ended (stored
    as store.models.Episode; the self-test's replayed action lists are sandbox.checks.probe.ReplayedEpisode)."""

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
        """Ended by the endpoint or the sandbox (an error past its retries, or a timeout waiting on it, the policy
        or a worker process), not by the model or the env: not final."""
        if self.termination == "timeout":
            return self.timeout_boundary != "env"
        return self.termination in INFRA_TERMINATIONS

    @property
    def timeout_boundary(self) -> str | None:
        """For a `timeout`: what was waited on (env, sandbox, policy, worker); else None."""
        if self.termination != "timeout":
            return None
        record = self.score_info.get("timeout")
        return str(record.get("boundary")) if isinstance(record, dict) else "env"

    @property
    def final(self) -> bool:
        """The episode's record: neither an infrastructure failure nor a timeout (those are played again)."""
        return self.termination != "timeout" and self.termination not in INFRA_TERMINATIONS

    @property
    def env_failure(self) -> bool:
        """The env's code failed it: an exception (`env_error`) or a call that never returned (`timeout` on `env`)."""
        return self.termination == "env_error" or self.timeout_boundary == "env"

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


_NOT_THE_ENVS = ("gapforge", "pydantic", "pydantic_core")  # module roots whose frames are never the env's own code
_STDLIB = sysconfig.get_paths()["stdlib"]


def env_error_text(exc: BaseException) -> str:
    """An exception the env's own code raised, as one line that keeps its point: a pydantic ValidationError's errors
    (field, message, the value given) instead of its "1 validation error for Score" header, and the file:line of the
    innermost frame of the env's code (a user's class; not gapforge, pydantic or the standard library)."""
    text = _text(exc)
    if isinstance(exc, ValidationError):
        errors = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or exc.title}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()[:3]
        )
        text = f"ValidationError: {exc.title}: {errors}"
    where = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        root = str(frame.f_globals.get("__name__") or "").split(".")[0]
        if root not in _NOT_THE_ENVS and not frame.f_code.co_filename.startswith(_STDLIB):
            where = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return f"{text} (at {where})" if where else text


def _failed(call: str, e: BaseException) -> tuple[Termination, str]:
    """How an exception from `env.<call>` ends the episode. An endpoint's failure inside the env's call (an LLM user
    simulator or judge whose endpoint is down past its retries) or the sandbox's is that boundary's: `endpoint_error`
    / `sandbox_error`, never stored, a resume plays it again. Another infrastructure failure (a full disk) propagates.
    Anything else is the env's code (`env_error`)."""
    if (isinstance(e, EndpointFault) and e.infrastructure) or isinstance(e, SandboxFault):
        termination: Termination = "endpoint_error" if isinstance(e, EndpointFault) else "sandbox_error"
        return termination, f"env.{call} failed on the {e.boundary} (infrastructure): {_text(e)}"
    if isinstance(e, GapforgeError) and e.infrastructure:
        raise e  # a full disk: the run's to stop on (resumable), not one episode's end
    return "env_error", f"env.{call} failed: {env_error_text(e)}"


async def call_env(env: Any, executor: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, a blocking call of `env`: on the event loop itself for a built-in env that declares `inline = True`
    (fast CPU-only envs: a worker-thread hop costs more than the call; envs.env_threads.runs_inline), else on
    `executor` (default: daemon threads a caller may abandon) in a copy of the caller's context (as asyncio.to_thread does)."""
    if runs_inline(env):
        return fn(*args)
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor or ENV_THREADS, call)


class TimedOut(Exception):
    """A call did not return by the episode's deadline (`call`: what was called, `boundary`: who was waited on)."""

    def __init__(self, call: str, boundary: str) -> None:
        self.call, self.boundary = call, boundary
        super().__init__(f"{call} did not return in time ({WAITED_ON.get(boundary, boundary)})")


async def bounded(awaitable: Any, deadline: float | None, call: str, boundary: str) -> Any:
    """Await `awaitable` until `deadline` (time.monotonic(); None: no limit); TimedOut past it. A TimeoutError the
    callee raises itself before the deadline is the callee's and propagates as it is."""
    if deadline is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        if time.monotonic() < deadline - 0.001:
            raise
        raise TimedOut(call, boundary) from None


def timeout_error(call: str, boundary: str, limit_s: float, what: str | None = None) -> tuple[str, dict[str, Any]]:
    """The error text and `score_info` of an episode ended by its time limit."""
    who = WAITED_ON.get(boundary, boundary) + (f" ({what})" if what else "")
    text = f"timeout: {call} did not return within the episode's time limit of {limit_s:g} s, waiting on {who}; the call was abandoned"
    return text, {"timeout": {"boundary": boundary, "call": call, "limit_s": limit_s}}


def empty_episode(
    env: str, task: TaskRef, policy: str, started_at: datetime, elapsed_s: float, **end: Any
) -> EpisodeRecord:
    """An episode that ended before the loop could play it; `end`: its termination and error (and score_info)."""
    timings = {"policy_s": 0.0, "env_s": elapsed_s, "total_s": elapsed_s}
    common = {"messages": [], "reward": 0.0, "success": False, "turns": 0, "timings": timings, "started_at": started_at}
    return EpisodeRecord(env=env, task=task, policy=policy, **common, **end)


def timed_out(
    env: str,
    task: TaskRef,
    policy: str,
    call: str,
    boundary: str,
    limit_s: float,
    started_at: datetime,
    elapsed_s: float,
    what: str | None = None,
) -> EpisodeRecord:
    """An episode that ended at its time limit before the loop could play it (e.g. its env was still being built,
    or a worker process holding it stopped answering)."""
    error, info = timeout_error(call, boundary, limit_s, what)
    return empty_episode(env, task, policy, started_at, elapsed_s, termination="timeout", error=error, score_info=info)


async def run_episode(
    policy: PolicyModel,
    env: Environment,
    task: TaskRef,
    *,
    max_turns: int = 30,
    temperature: float | None = None,
    executor: Executor | None = None,
    timeout_s: float | None = None,
    deadline: float | None = None,
) -> EpisodeRecord:
    """Reset, then policy.respond -> env.step until done or `max_turns` (raised to `env.max_turns` where the env has one), then score.

    Blocking env calls run on `executor` (default: daemon threads, envs.env_threads), or on the event loop
    itself for a built-in env that declares `inline = True`. `timeout_s`: the episode's time limit (module
    docstring), counted from `deadline - timeout_s` when the caller passes `deadline`, else from now.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if deadline is None and timeout_s is not None:
        deadline = time.monotonic() + timeout_s
    limit_s = timeout_s if timeout_s is not None else (deadline - time.monotonic() if deadline is not None else 0.0)
    env_turns = getattr(env, "max_turns", None)  # an env with its own step limit (τ²) is never cut before it
    if isinstance(env_turns, int) and env_turns > max_turns:
        max_turns = env_turns
    started_at = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    clock = {"policy_s": 0.0, "env_s": 0.0}
    waited_on = boundary_of(env)

    async def env_call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return await bounded(call_env(env, executor, fn, *args), deadline, f"env.{name}", waited_on)
        finally:
            clock["env_s"] += time.perf_counter() - t

    messages: list[Message] = []
    step_info: list[dict[str, Any]] = []
    turns = 0
    termination: Termination = "max_turns"
    error: str | None = None
    late: TimedOut | None = None
    unscored = False
    try:
        messages = returned("reset", await env_call("reset", env.reset, task))  # EnvError (bad task) propagates
        tools = await env_call("tools", env.tools)
    except EnvError:
        raise
    except TimedOut as e:
        late = e
    except SandboxError as e:
        termination, error = "sandbox_error", f"sandbox lost at env.reset: {_text(e)}"
    except Exception as e:
        termination, error = _failed("reset", e)
        unscored = True  # nothing to score: calling score() would add a second error of its own
    else:
        if getattr(env, "done", False) is True:  # ended inside reset (τ²: the user stopped at once, max_steps=1)
            termination = "done"
            max_turns = 0
        while turns < max_turns:
            t = time.perf_counter()
            try:
                reply = await bounded(
                    policy.respond(messages, tools, temperature=temperature), deadline, "policy.respond", "policy"
                )
            except TimedOut as e:
                late = e
                break
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
                result = returned("step", await env_call("step", env.step, reply))
            except TimedOut as e:
                late = e
                break
            except SandboxError as e:
                termination, error = "sandbox_error", f"sandbox lost at env.step: {_text(e)}"
                break
            except Exception as e:
                termination, error = _failed("step", e)
                break
            messages.extend(result.messages)
            if result.info:
                step_info.append({"turn": turns, "info": dict(result.info)})
            if result.done:
                termination = "done"
                break

    reward, success, components, score_info = 0.0, False, {}, {}
    if late is None and not unscored:
        try:
            score = returned("score", await env_call("score", env.score))
            reward, success, components, score_info = (
                score.reward,
                score.success,
                dict(score.components),
                dict(score.info),
            )
        except TimedOut as e:
            late = e
        except Exception as e:  # the env's code failed to score: its boundary, not a 0-reward verdict on the model
            failed, text = _failed("score", e)
            score_info = {"score_error": text.removeprefix("env.score failed: ")}
            if termination not in INFRA_TERMINATIONS:  # an infrastructure end stays one (not final: a resume redoes it)
                termination = failed
            error = f"{error}; {text}" if error else text
    if late is not None:  # not scored: the env may still be inside the abandoned call
        termination = "timeout"
        what = getattr(env, "name", None) if late.boundary == "env" else None
        error, score_info = timeout_error(late.call, late.boundary, limit_s, what)
        reward, success, components = 0.0, False, {}

    clock["total_s"] = time.perf_counter() - t0
    ids = {"env": env.name, "task": task, "policy": policy.name, "started_at": started_at}
    scored = {"reward": reward, "success": success, "components": components, "score_info": score_info}
    loop = {"messages": messages, "step_info": step_info, "turns": turns, "termination": termination, "error": error}
    return EpisodeRecord(**ids, **scored, **loop, timings=clock)
