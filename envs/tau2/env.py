"""Tau2Env: a τ²-bench domain behind gapforge's TargetEnvironment protocol.

One episode mirrors tau2's own orchestrator (tau2.orchestrator.Orchestrator):
the trajectory starts with tau2's default agent greeting, the user simulator
answers it with the first user turn, tool calls run through a fresh tau2
domain environment (`Environment.get_response`, so tool errors come back as
"Error: ..." tool messages exactly as in tau2), text goes to the user
simulator, and the episode ends on the user's stop signal (###STOP###,
###TRANSFER###, ###OUT-OF-SCOPE###), on a successful `transfer_to_human_agents`
call, or on tau2's max-steps / max-errors limits. `score()` hands the tau2
trajectory to tau2's `evaluate_simulation`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from envs.errors import EnvError
from envs.protocol import Message, Score, StepResult, TaskRef
from envs.tau2 import convert
from envs.tau2 import domain as dom
from envs.tau2.users import ScriptedUser, coerce_endpoint, llm_user

DEFAULT_MAX_STEPS = 200  # tau2.config.DEFAULT_MAX_STEPS
DEFAULT_MAX_ERRORS = 10  # tau2.config.DEFAULT_MAX_ERRORS


@dataclass
class _Episode:
    task: Any
    env: Any  # tau2 Environment
    user: Any
    user_state: Any
    trajectory: list[Any]  # tau2 messages, as tau2's orchestrator would record them
    started: str
    steps: int = 0
    errors: int = 0
    termination: Any = None  # tau2 TerminationReason once done
    ended_by: str | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Tau2Env:
    """τ²-bench `domain` ("retail" or "airline") through the real tau2 package.

    user="scripted" (offline, deterministic, see envs.tau2.users) or "llm" (tau2's
    LLM user simulator; `user_model` = UserEndpoint / dict / EndpointConfig-like).
    split selects tau2's task split ("base" = all tasks, "train", "test").
    """

    def __init__(
        self,
        domain: str,
        *,
        user: Literal["scripted", "llm"] | str = "scripted",
        user_model: Any = None,
        split: str = "base",
        max_steps: int = DEFAULT_MAX_STEPS,
        max_errors: int = DEFAULT_MAX_ERRORS,
    ) -> None:
        self.domain = dom.check_domain(domain)
        self.name = f"tau2:{domain}"
        if user not in ("scripted", "llm"):
            raise EnvError(f"unknown user simulator {user!r} for {self.name}; choose 'scripted' or 'llm'")
        self.user_kind = user
        self.endpoint = coerce_endpoint(user_model) if user == "llm" else None
        if max_steps < 1 or max_errors < 1:
            raise EnvError(f"{self.name}: max_steps and max_errors must be >= 1")
        self.max_steps, self.max_errors = max_steps, max_errors
        self._tasks = dom.tasks(self.domain, split)
        self.split = split
        self._episode: _Episode | None = None

    # ---- catalogue -------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return dom.tool_schemas(self.domain)

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def task_family(self, task_id: str) -> str:
        return dom.task_family(self.domain, self._task(task_id))

    def task(self, task_id: TaskRef) -> Any:
        """tau2's Task object (scenario, gold actions, evaluation criteria) — for tests and reference replays."""
        return self._task(task_id)

    def _task(self, task_id: TaskRef) -> Any:
        key = str(task_id)
        if key not in self._tasks:
            ids = list(self._tasks)
            raise EnvError(f"unknown task id {key!r} for {self.name} (split {self.split!r}: {len(ids)} tasks, ids {ids[0]}..{ids[-1]}; see task_ids())")
        return self._tasks[key]

    # ---- episode -----------------------------------------------------------------
    def reset(self, task: TaskRef) -> list[Message]:
        t = dom.load_tau2()
        spec = self._task(task)
        env = dom.new_environment(self.domain)
        initial = spec.initial_state
        if initial is not None and initial.message_history:
            raise EnvError(f"{self.name} task {spec.id!r} starts from a message history, which this adapter does not replay")
        env.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=[],
        )
        user = ScriptedUser(spec) if self.endpoint is None else llm_user(self.endpoint, spec)
        greeting = t.FIRST_AGENT_MESSAGE.model_copy(deep=True)
        greeting.timestamp = _now()
        ep = _Episode(task=spec, env=env, user=user, user_state=user.get_init_state(), trajectory=[greeting], started=_now())
        self._episode = ep
        first = self._ask_user(ep, greeting)
        if ep.termination is not None:
            raise EnvError(f"{self.name} task {spec.id!r}: the user simulator stopped before saying anything")
        return [Message.system(dom.system_prompt(self.domain)), first]

    def step(self, message: Message) -> StepResult:
        ep = self._episode
        if ep is None:
            raise EnvError(f"{self.name}: call reset(task) before step()")
        if ep.termination is not None:
            raise EnvError(f"{self.name}: the episode is over ({ep.ended_by}); call reset(task) for a new one")
        if message.role != "assistant":
            raise EnvError(f"{self.name}: step() takes the assistant's message, got role {message.role!r}")
        t = dom.load_tau2()
        reason = t.simulation.TerminationReason
        agent_msg = convert.to_tau2_assistant(message)
        agent_msg.timestamp = _now()
        ep.trajectory.append(agent_msg)
        ep.steps += 1
        if agent_msg.is_tool_call():
            out = self._run_tools(ep, agent_msg)
        elif not agent_msg.has_text_content():
            self._end(ep, reason.AGENT_ERROR, "empty_message")
            out = []
        else:
            out = [self._ask_user(ep, agent_msg)]
        if ep.termination is None and ep.steps >= self.max_steps:
            self._end(ep, reason.MAX_STEPS, "max_steps")
        if ep.termination is None and ep.errors >= self.max_errors:
            self._end(ep, reason.TOO_MANY_ERRORS, "too_many_errors")
        done = ep.termination is not None
        return StepResult(messages=out, done=done, info={"termination": ep.ended_by} if done else {})

    def _run_tools(self, ep: _Episode, agent_msg: Any) -> list[Message]:
        out = []
        for call in agent_msg.tool_calls:
            result = ep.env.get_response(call)  # tau2 catches tool exceptions into "Error: ..." results
            result.timestamp = _now()
            ep.trajectory.append(result)
            ep.errors += int(result.error)
            out.append(Message.tool(call.id, result.content if result.content is not None else "", name=call.name))
            if call.name == dom.TRANSFER_TOOL and not result.error:
                self._end(ep, dom.load_tau2().simulation.TerminationReason.AGENT_STOP, "agent_transfer")
        ep.steps += 1
        return out

    def _ask_user(self, ep: _Episode, incoming: Any) -> Message:
        try:
            reply, ep.user_state = ep.user.generate_next_message(incoming, ep.user_state)
        except EnvError:
            raise
        except Exception as exc:  # litellm / HTTP failures of the user-simulator endpoint
            where = (self.endpoint.base_url or self.endpoint.model) if self.endpoint else "scripted user"
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            raise EnvError(f"{self.name}: user simulator at {where} failed: {type(exc).__name__}: {first_line}") from exc
        reply.timestamp = _now()
        ep.trajectory.append(reply)
        ep.steps += 1
        if reply.is_tool_call():
            raise EnvError(f"{self.name}: the user simulator made a tool call, which retail/airline users cannot do")
        if ep.user.is_stop(reply):
            self._end(ep, dom.load_tau2().simulation.TerminationReason.USER_STOP, "user_stop")
        return Message.user(reply.content or "")

    @staticmethod
    def _end(ep: _Episode, termination: Any, ended_by: str) -> None:
        if ep.termination is None:
            ep.termination, ep.ended_by = termination, ended_by

    def score(self) -> Score:
        """tau2's evaluator on the episode so far (an unfinished episode is scored as if the agent stopped now)."""
        ep = self._episode
        if ep is None:
            raise EnvError(f"{self.name}: call reset(task) before score()")
        t = dom.load_tau2()
        termination = ep.termination or t.simulation.TerminationReason.AGENT_STOP
        simulation = t.simulation.SimulationRun(
            id=str(uuid.uuid4()),
            task_id=ep.task.id,
            start_time=ep.started,
            end_time=_now(),
            duration=0.0,
            termination_reason=termination,
            messages=list(ep.trajectory),
        )
        evaluation = convert.evaluation_type(ep.task)
        reward_info = t.evaluate_simulation(simulation=simulation, task=ep.task, evaluation_type=evaluation, solo_mode=False, domain=self.domain)
        return convert.to_score(reward_info, evaluation, ep.ended_by or "in_progress", finished=ep.termination is not None)

    def trajectory(self) -> list[dict[str, Any]]:
        """The current episode as tau2 records it (JSON-ready dicts), for inspection."""
        return [m.model_dump(mode="json") for m in self._episode.trajectory] if self._episode else []

    def close(self) -> None:
        self._episode = None
