"""Tau2Env: a τ²-bench domain behind gapforge's TargetEnvironment protocol.

One episode follows tau2's own orchestrator (tau2.orchestrator.Orchestrator)
message for message: tau2's default agent greeting opens the trajectory (the
policy sees it too), the user simulator answers it; each agent message, each
user message and each batch of tool results is one *step*; after every step
whose next receiver is not the environment, tau2's limits are checked (steps >=
max_steps -> `max_steps`, then tool errors >= max_errors -> `too_many_errors`,
each overriding what the step itself decided) — so the check right after the
agent's text runs before the user answers. Agent tool calls run through a fresh
tau2 domain environment (`get_response`: tool errors are "Error: ..." tool
messages), text goes to the user, whose own tool calls (telecom's device) run
against the same environment until it answers in words. The episode ends on
the user's stop signal (###STOP###, ###TRANSFER###, ###OUT-OF-SCOPE###:
`user_stop`) or a limit; a transfer tool call does not end it (the user answers
the agent's next words with ###TRANSFER###, as in tau2). `score()` hands the tau2
trajectory to tau2's `evaluate_simulation`, which gives 0 to any ending but a stop.

Scoring: `to_score` renames tau2's `RewardInfo` into a `Score`. tau2 reads its NL-assertion judge's model and
arguments from module globals of `tau2.evaluator.evaluator_nl_assertions` (`DEFAULT_LLM_NL_ASSERTIONS[_ARGS]`, copied
from tau2.config at import) and has no parameter for them: `configured_judge(endpoint)` sets both for one
evaluation under a process-wide lock (two episodes scoring at once with different judges cannot see each other's
endpoint) and restores them after; the judging itself stays tau2's. Without a judge, a task whose reward basis
contains NL_ASSERTION is evaluated by tau2's `ALL` evaluation on the task with NL_ASSERTION removed from its basis:
every other component is still tau2's, and the score records what was dropped.
"""

from __future__ import annotations

import importlib
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gapforge.envs.errors import EnvError, SimulatorEndpointError
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef
from gapforge.envs.tau2 import domain as dom
from gapforge.envs.tau2.domain import load_tau2
from gapforge.envs.tau2.users import ScriptedUser, litellm_args, litellm_model, llm_user
from gapforge.envs.user_endpoint import UserEndpoint, coerce_endpoint, endpoint_down

DEFAULT_MAX_STEPS = 200  # tau2.config.DEFAULT_MAX_STEPS (the `tau2 run` default)
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


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Tau2Env:
    """τ²-bench `domain` ("retail", "airline", "telecom") through the real tau2 package.

    user="scripted" (offline, deterministic, see envs.tau2.users) or "llm" (tau2's
    LLM user simulator, with the domain's user tools; `user_model` = UserEndpoint /
    dict / EndpointConfig-like). split selects tau2's task split ("base" = all).
    judge: an OpenAI-compatible endpoint for tau2's NL-assertion judge (same shapes
    as user_model); None scores such tasks without that component (recorded).
    """

    def __init__(
        self,
        domain: str,
        *,
        user: Literal["scripted", "llm"] | str = "scripted",
        user_model: Any = None,
        judge: Any = None,
        split: str = "base",
        max_steps: int = DEFAULT_MAX_STEPS,
        max_errors: int = DEFAULT_MAX_ERRORS,
    ) -> None:
        self.domain = dom.check_domain(domain)
        self.name = f"tau2:{domain}"
        if user not in ("scripted", "llm"):
            raise EnvError(f"unknown user simulator {user!r} for {self.name}; choose 'scripted' or 'llm'")
        self.user_kind = user
        self.endpoint = coerce_endpoint(user_model, "tau2 user simulator") if user == "llm" else None
        self.judge: UserEndpoint | None = coerce_endpoint(judge, "tau2 NL judge") if judge is not None else None
        if max_steps < 1 or max_errors < 1:
            raise EnvError(f"{self.name}: max_steps and max_errors must be >= 1")
        self.max_steps, self.max_errors = max_steps, max_errors
        self._tasks = dom.tasks(self.domain, split)
        self.split = split
        self._episode: _Episode | None = None

    @property
    def max_turns(self) -> int:
        """Upper bound on agent messages in one episode (each is at least one tau2 step): the policy
        loop honours it so it never cuts a τ² episode before tau2's own step limit does."""
        return self.max_steps

    def tools(self) -> list[dict[str, Any]]:
        return dom.tool_schemas(self.domain)

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def task_family(self, task_id: str) -> str:
        return dom.task_family(self.domain, self.task(task_id))

    def data_version(self) -> dict[str, str]:
        """The τ² package release and task-file digest that score this env's episodes."""
        return dom.data_version(self.domain)

    def task(self, task_id: TaskRef) -> Any:
        """tau2's Task object (scenario, gold actions, evaluation criteria)."""
        key = str(task_id)
        if key not in self._tasks:
            ids = list(self._tasks)
            raise EnvError(
                f"unknown task id {key!r} for {self.name} (split {self.split!r}: {len(ids)} tasks, ids {ids[0]}..{ids[-1]}; see task_ids())"
            )
        return self._tasks[key]

    def reset(self, task: TaskRef) -> list[Message]:
        """[system, tau2's greeting (assistant), the user's first turn] — the history tau2's agent starts from.

        The user's first turn may end the episode (`done`): a stop signal, or the step limit at
        max_steps=1; the user's words are still returned when it said any."""
        t = dom.load_tau2()
        spec = self.task(task)
        env = dom.new_environment(self.domain)
        initial = spec.initial_state
        if initial is not None and initial.message_history:
            raise EnvError(
                f"{self.name} task {spec.id!r} starts from a message history, which this adapter does not replay"
            )
        env.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=[],
        )
        tools = dom.user_tools(env)
        user = ScriptedUser(spec) if self.endpoint is None else llm_user(self.endpoint, spec, tools)
        greeting = t.FIRST_AGENT_MESSAGE.model_copy(deep=True)
        greeting.timestamp = _now()
        ep = _Episode(
            task=spec, env=env, user=user, user_state=user.get_init_state(), trajectory=[greeting], started=_now()
        )
        env.sync_tools()
        self._episode = ep
        first = self._user_turn(ep, greeting)
        # The episode may already be over (`done`): the user stopped in its first message, or
        # max_steps=1. tau2 scores such a run as it stands, and so does score() here.
        return [
            Message.system(dom.system_prompt(self.domain)),
            Message.assistant(greeting.content),
            *([first] if first else []),
        ]

    @property
    def done(self) -> bool:
        """The episode is over. The policy loop reads it right after reset(): an episode that ended
        before the agent's first turn is scored without asking the policy, as tau2 does."""
        return self._episode is not None and self._episode.termination is not None

    def step(self, message: Message) -> StepResult:
        ep = self._episode
        if ep is None:
            raise EnvError(f"{self.name}: call reset(task) before step()")
        if ep.termination is not None:
            raise EnvError(f"{self.name}: the episode is over ({self._ended(ep)}); call reset(task) for a new one")
        if message.role != "assistant":
            raise EnvError(f"{self.name}: step() takes the assistant's message, got role {message.role!r}")
        agent_msg = to_tau2_assistant(message)
        agent_msg.timestamp = _now()
        out: list[Message] = []
        ep.trajectory.append(agent_msg)
        if not agent_msg.is_tool_call() and not agent_msg.has_text_content():
            # tau2's orchestrator raises on an empty agent message (AssistantMessage.validate); the run is an agent error
            ep.termination = dom.load_tau2().simulation.TerminationReason.AGENT_ERROR
        elif agent_msg.is_tool_call():
            self._count_step(ep, to_env=True)
            out = self._run_tools(ep, agent_msg)
            self._count_step(ep, to_env=False)
        else:
            self._count_step(ep, to_env=False)  # the check right after the agent's text
            if ep.termination is None:
                reply = self._user_turn(ep, agent_msg)
                out = [reply] if reply is not None else []
        done = ep.termination is not None
        return StepResult(messages=out, done=done, info={"termination": self._ended(ep)} if done else {})

    def _count_step(self, ep: _Episode, *, to_env: bool) -> None:
        """One tau2 orchestrator step; its limit checks run only when the next receiver is not the environment."""
        ep.steps += 1
        ep.env.sync_tools()
        if to_env:
            return
        reason = dom.load_tau2().simulation.TerminationReason
        if ep.steps >= self.max_steps:
            ep.termination = reason.MAX_STEPS
        if ep.errors >= self.max_errors:
            ep.termination = reason.TOO_MANY_ERRORS

    def _run_tools(self, ep: _Episode, caller_msg: Any) -> list[Message]:
        out = []
        for call in caller_msg.tool_calls:
            result = ep.env.get_response(call)  # tau2 catches tool exceptions into "Error: ..." results
            result.timestamp = _now()
            ep.trajectory.append(result)
            ep.errors += int(result.error)
            out.append(Message.tool(call.id, result.content if result.content is not None else "", name=call.name))
        return out

    def _user_turn(self, ep: _Episode, incoming: Any) -> Message | None:
        """The user answers `incoming`; its tool calls run until it speaks, stops, or a limit ends the episode."""
        t = dom.load_tau2()
        while True:
            reply = self._ask_user(ep, incoming)
            ep.trajectory.append(reply)
            if t.UserSimulator.is_stop(reply):
                ep.termination = t.simulation.TerminationReason.USER_STOP
            self._count_step(ep, to_env=reply.is_tool_call())
            if not reply.is_tool_call():
                return Message.user(reply.content or "")
            start = len(ep.trajectory)
            self._run_tools(ep, reply)
            results = ep.trajectory[start:]
            self._count_step(ep, to_env=False)
            if ep.termination is not None:
                return None
            incoming = (
                results[0] if len(results) == 1 else t.message.MultiToolMessage(role="tool", tool_messages=results)
            )

    def _ask_user(self, ep: _Episode, incoming: Any) -> Any:
        try:
            reply, ep.user_state = ep.user.generate_next_message(incoming, ep.user_state)
            reply.validate()
        except EnvError:
            raise
        except Exception as exc:  # litellm / HTTP failures of the user-simulator endpoint, an empty user message
            where = (self.endpoint.base_url or self.endpoint.model) if self.endpoint else "scripted user"
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            down = endpoint_down(type(exc).__name__, getattr(exc, "status_code", None))
            raise (SimulatorEndpointError if down else EnvError)(
                f"{self.name}: user simulator at {where} failed: {type(exc).__name__}: {first_line}"
            ) from exc
        reply.timestamp = _now()
        return reply

    @staticmethod
    def _ended(ep: _Episode) -> str:
        return ep.termination.value if ep.termination is not None else "unfinished"

    def score(self) -> Score:
        """tau2's evaluator on the episode. An unfinished episode (the policy loop stopped first, e.g. the
        endpoint failed) has no tau2 stop, so tau2 gives it 0; info says `termination_reason: unfinished`."""
        ep = self._episode
        if ep is None:
            raise EnvError(f"{self.name}: call reset(task) before score()")
        t = dom.load_tau2()
        termination = ep.termination or t.simulation.TerminationReason.AGENT_ERROR
        simulation = t.simulation.SimulationRun(
            id=str(uuid.uuid4()),
            task_id=ep.task.id,
            start_time=ep.started,
            end_time=_now(),
            duration=0.0,
            termination_reason=termination,
            messages=list(ep.trajectory),
        )
        evaluation, task, dropped = evaluation_plan(ep.task, self.judge)
        try:
            with configured_judge(self.judge if evaluation == t.EvaluationType.ALL_WITH_NL_ASSERTIONS else None):
                reward_info = t.evaluate_simulation(
                    simulation=simulation, task=task, evaluation_type=evaluation, solo_mode=False, domain=self.domain
                )
        except Exception as exc:
            if self.judge is None or evaluation != t.EvaluationType.ALL_WITH_NL_ASSERTIONS:
                raise
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            down = endpoint_down(type(exc).__name__, getattr(exc, "status_code", None))
            raise (SimulatorEndpointError if down else EnvError)(
                f"{self.name}: NL judge at {self.judge.base_url or self.judge.model} failed: {type(exc).__name__}: {first_line}"
            ) from exc
        score = to_score(
            reward_info, evaluation, self._ended(ep), ep.termination is not None, dropped, self.data_version()
        )
        score.info["steps"] = ep.steps
        return score

    def trajectory(self) -> list[dict[str, Any]]:
        """The current episode as tau2 records it (JSON-ready dicts), for inspection."""
        return [m.model_dump(mode="json") for m in self._episode.trajectory] if self._episode else []

    def close(self) -> None:
        self._episode = None


def to_tau2_assistant(message: Message) -> Any:
    """An assistant protocol message as a tau2 AssistantMessage (tool_calls None when there are none, as tau2 expects)."""
    t = load_tau2()
    calls = [t.message.ToolCall(**tc.model_dump(), requestor="assistant") for tc in message.tool_calls]
    return t.message.AssistantMessage(role="assistant", content=message.content, tool_calls=calls or None)


def to_score(
    reward_info: Any, evaluation: Any, termination: str, finished: bool, dropped: list[str], data: dict[str, str]
) -> Score:
    """tau2's RewardInfo as a Score: reward, success (tau2's is_successful), named components, what was dropped."""
    t = load_tau2()
    reward = min(1.0, max(0.0, float(reward_info.reward)))
    if dropped and reward_info.reward_basis is not None and not reward_info.reward_basis:
        reward = 0.0  # the judge was the whole basis: nothing was scored, so no credit
    components: dict[str, float] = {}
    for kind, value in (reward_info.reward_breakdown or {}).items():
        components[getattr(kind, "value", str(kind)).lower()] = float(value)
    if reward_info.db_check is not None:
        components.setdefault("db", float(reward_info.db_check.db_reward))
    if reward_info.action_checks:
        components.setdefault("action", 1.0 if all(c.action_match for c in reward_info.action_checks) else 0.0)
    if reward_info.communicate_checks:
        components.setdefault("communicate", 1.0 if all(c.met for c in reward_info.communicate_checks) else 0.0)
    info: dict[str, Any] = {
        "evaluator": "tau2.evaluate_simulation",
        "evaluation_type": evaluation.value,
        "reward_basis": [getattr(b, "value", str(b)) for b in reward_info.reward_basis or []],
        "termination_reason": termination,
        "finished": finished,
        "tau2_data": dict(data),
    }
    if dropped:
        info["dropped_components"] = list(dropped)
        info["dropped_because"] = "no NL judge configured (Tau2Env judge=...)"
    if reward_info.action_checks:
        info["actions_missing"] = [c.action.action_id for c in reward_info.action_checks if not c.action_match]
    if reward_info.communicate_checks:
        info["communicate_missing"] = [c.info for c in reward_info.communicate_checks if not c.met]
    if reward_info.info and "note" in reward_info.info:
        info["note"] = reward_info.info["note"]
    return Score(reward=reward, success=bool(t.is_successful(reward)), components=components, info=info)


_JUDGE_MODULE = "tau2.evaluator.evaluator_nl_assertions"
_LOCK = threading.Lock()


@contextmanager
def configured_judge(endpoint: UserEndpoint | None) -> Iterator[None]:
    """tau2's NL-assertion judge talks to `endpoint` inside the block (no-op for None)."""
    if endpoint is None:
        yield
        return
    module = importlib.import_module(_JUDGE_MODULE)
    with _LOCK:
        saved = module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS
        module.DEFAULT_LLM_NL_ASSERTIONS = litellm_model(endpoint)
        module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = litellm_args(endpoint)
        try:
            yield
        finally:
            module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = saved


def evaluation_plan(task: Any, judge: UserEndpoint | None) -> tuple[Any, Any, list[str]]:
    """(tau2 EvaluationType, the task to evaluate, reward components dropped) for `task`: ALL normally;
    ALL_WITH_NL_ASSERTIONS when the task needs a judge and one is configured; without a judge, ALL on a copy of the
    task whose reward basis lacks NL_ASSERTION, with ["nl_assertion"] reported as dropped."""
    t = load_tau2()
    criteria = task.evaluation_criteria
    if criteria is None or t.RewardType.NL_ASSERTION not in criteria.reward_basis:
        return t.EvaluationType.ALL, task, []
    if judge is not None:
        return t.EvaluationType.ALL_WITH_NL_ASSERTIONS, task, []
    reduced = task.model_copy(deep=True)
    reduced.evaluation_criteria.reward_basis = [
        b for b in task.evaluation_criteria.reward_basis if b != t.RewardType.NL_ASSERTION
    ]
    return t.EvaluationType.ALL, reduced, ["nl_assertion"]
