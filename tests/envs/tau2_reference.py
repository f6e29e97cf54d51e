"""Reference runs: the same scripted agent and user through tau2's own orchestrator, for parity checks.

`gold_script(env, task_id, tail=...)` is a deterministic agent: it walks the
task's gold actions in order — an assistant action becomes that tool call, a
user-side action (telecom) becomes a text turn naming the tool, which the
scripted user then performs — and then keeps going with `tail`:
"answer" (the communicate info — plus the transfer announcement after a gold
transfer, which the user answers with ###TRANSFER### — or a closing line, every
turn: the user runs out of facts and stops), "loop" (a successful read call forever: only tau2's
step limit ends it) or "errors" (a call to an unknown tool forever: tau2's error
limit ends it).

`run_adapter(env, task_id, script)` plays it through `Tau2Env`;
`run_orchestrator(env, task_id, script)` plays it through
`tau2.orchestrator.Orchestrator` with a fresh user of the adapter's kind (its
`ScriptedUser`, or tau2's LLM user on the adapter's endpoint) and scores the run
with `evaluate_simulation` exactly as `tau2 run` does (same evaluation plan as
the adapter). Both return (reward, termination reason).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any, Literal

from gapforge.envs.protocol import Message, ToolCall
from gapforge.envs.tau2 import domain as dom
from gapforge.envs.tau2.env import Tau2Env, evaluation_plan, to_tau2_assistant
from gapforge.envs.tau2.users import ScriptedUser, llm_user

Script = Callable[[], Iterator[Message]]
Tail = Literal["answer", "loop", "errors"]

_LOOP_CALLS = {"retail": ("list_all_product_types", {}), "airline": ("list_all_airports", {})}
TRANSFER_LINE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
_PHONE = re.compile(r"\d{3}-\d{3}-\d{4}")


def loop_call(domain: str, task: Any) -> tuple[str, dict[str, Any]]:
    """A read call that succeeds every time in `task`'s world."""
    if domain in _LOOP_CALLS:
        return _LOOP_CALLS[domain]
    phone = _PHONE.search(str(task.user_scenario))
    if phone is None:
        raise ValueError(f"telecom task {task.id!r}: no phone number in its scenario to look up")
    return "get_customer_by_phone", {"phone_number": phone.group(0)}


def gold_script(env: Tau2Env, task_id: str, tail: Tail = "answer") -> Script:
    """A fresh-iterator factory for the deterministic gold-replay agent of `task_id` (see module doc)."""
    task = env.task(task_id)
    actions = list(task.evaluation_criteria.actions or []) if task.evaluation_criteria else []
    closing = " ".join(task.evaluation_criteria.communicate_info or []) if task.evaluation_criteria else ""
    if any(a.name == dom.TRANSFER_TOOL and a.requestor == "assistant" for a in actions):
        closing = (
            closing + " " + TRANSFER_LINE
        ).strip()  # what tau2's policies tell the agent to say after transferring
    read_name, read_args = loop_call(env.domain, task)

    def script() -> Iterator[Message]:
        for action in actions:
            if action.requestor == "assistant":
                yield Message.assistant(
                    tool_calls=[
                        ToolCall(id=f"gold_{action.action_id}", name=action.name, arguments=dict(action.arguments))
                    ]
                )
            else:
                yield Message.assistant(f"Please do this on your phone now: {action.name}.")
        for i in count():
            if tail == "answer":
                yield Message.assistant(closing or "Your request is complete. Is there anything else?")
            elif tail == "loop":
                yield Message.assistant(
                    tool_calls=[ToolCall(id=f"loop_{i}", name=read_name, arguments=dict(read_args))]
                )
            else:
                yield Message.assistant(tool_calls=[ToolCall(id=f"bad_{i}", name="no_such_tool", arguments={})])

    return script


def run_adapter(env: Tau2Env, task_id: str, script: Script, max_messages: int = 10_000) -> tuple[float, str]:
    """Play `script` through the adapter until the episode ends; (reward, termination reason)."""
    env.reset(task_id)
    messages = script()
    for _ in range(max_messages if not env.done else 0):  # over before the agent's first turn: scored as is
        if env.step(next(messages)).done:
            break
    score = env.score()
    return score.reward, score.info["termination_reason"]


def _scripted_agent_class() -> type:
    t = dom.load_tau2()

    class ScriptedTau2Agent(t.LocalAgent):  # type: ignore[misc, name-defined]
        """A tau2 agent that answers every message with the script's next message."""

        def __init__(self, tools: list[Any], domain_policy: str, messages: Iterator[Message]) -> None:
            super().__init__(tools=tools, domain_policy=domain_policy)
            self.messages = messages

        def get_init_state(self, message_history: list[Any] | None = None) -> list[Any]:
            return list(message_history or [])

        def generate_next_message(self, message: Any, state: list[Any]) -> tuple[Any, list[Any]]:
            reply = to_tau2_assistant(next(self.messages))
            state.extend([message, reply])
            return reply, state

    return ScriptedTau2Agent


def run_orchestrator(env: Tau2Env, task_id: str, script: Script) -> tuple[float, str]:
    """Play `script` and a fresh user of the adapter's kind (ScriptedUser, or tau2's LLM user on the adapter's
    endpoint) through tau2's own Orchestrator and evaluator; (reward, termination)."""
    t = dom.load_tau2()
    task = env.task(task_id)
    environment = dom.new_environment(env.domain)
    agent = _scripted_agent_class()(environment.get_tools(), environment.get_policy(), script())
    user = ScriptedUser(task) if env.endpoint is None else llm_user(env.endpoint, task, dom.user_tools(environment))
    orchestrator = t.Orchestrator(
        domain=env.domain,
        agent=agent,
        user=user,
        environment=environment,
        task=task,
        max_steps=env.max_steps,
        max_errors=env.max_errors,
    )
    simulation = orchestrator.run()
    evaluation, scored_task, _ = evaluation_plan(task, None)
    reward_info = t.evaluate_simulation(
        simulation=simulation, task=scored_task, evaluation_type=evaluation, solo_mode=False, domain=env.domain
    )
    return float(reward_info.reward), str(
        getattr(simulation.termination_reason, "value", simulation.termination_reason)
    )
