"""The two user simulators the adapter drives, both speaking tau2's user interface (`get_init_state`,
`generate_next_message`, `is_stop`) and returning tau2 `UserMessage`s.

LLM user (`user="llm"`): tau2's own `UserSimulator` (its guidelines + the task's user scenario), calling the model
through litellm at an OpenAI-compatible endpoint given as `UserEndpoint` (or a dict / an object with its attributes,
e.g. gapforge's `EndpointConfig`).

Scripted user (`user="scripted"`): deterministic, from the task only. It opens with the scenario's reason for the
call, then answers each agent text: tau2's ###TRANSFER### if the agent says the user is being transferred; the user's
next user-side gold action as a user tool call if the text names its tool (telecom: `toggle_airplane_mode`, ...),
reporting the result back in words; else the next scenario fact (known info, then the task instructions), then
###STOP###. It never confirms anything, so it suits tests and gold replays (it drives tau2's own orchestrator in the
parity test), not measuring a real policy.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gapforge.envs.tau2.domain import load_tau2
from gapforge.envs.user_endpoint import UserEndpoint


def litellm_model(endpoint: UserEndpoint) -> str:
    if endpoint.base_url and not endpoint.model.startswith("openai/"):
        return f"openai/{endpoint.model}"
    return endpoint.model


def litellm_args(endpoint: UserEndpoint) -> dict[str, Any]:
    args: dict[str, Any] = {
        "temperature": endpoint.temperature,
        "timeout": endpoint.timeout_s,
        "num_retries": endpoint.max_retries,
    }
    if endpoint.base_url:
        args["api_base"] = endpoint.base_url
        args["api_key"] = endpoint.secret() or "not-needed"  # local servers ignore the key, the client insists on one
    elif endpoint.api_key:
        args["api_key"] = endpoint.secret()
    return args


@cache
def _litellm_can_skip_mcp() -> bool:
    """Whether this litellm's completion() knows `_skip_mcp_handler` (it imports the optional `mcp`
    package for every call with tools unless told to skip; plain function tools need none of it)."""
    import inspect

    import litellm.main

    return "_skip_mcp_handler" in inspect.unwrap(litellm.main.completion).__code__.co_consts


def llm_user(endpoint: UserEndpoint, task: Any, user_tools: list[Any] | None = None) -> Any:
    """tau2's own LLM user simulator for `task`, talking to `endpoint`, with the domain's user tools (telecom)."""
    t = load_tau2()
    args = litellm_args(endpoint)
    if user_tools and _litellm_can_skip_mcp():
        args["_skip_mcp_handler"] = True
    return t.UserSimulator(
        tools=user_tools, instructions=str(task.user_scenario), llm=litellm_model(endpoint), llm_args=args
    )


TRANSFER_WORDS = ("transferred", "transferring", "transfer you")


class ScriptedUser:
    """Deterministic user from the task: opening, user-side gold actions when asked by name, facts, then stop."""

    def __init__(self, task: Any) -> None:
        instructions = task.user_scenario.instructions
        if isinstance(instructions, str):
            self.lines = [instructions]
        else:
            parts = [instructions.reason_for_call, instructions.known_info, instructions.task_instructions]
            self.lines = [p.strip() for p in parts if p and p.strip()]
        criteria = task.evaluation_criteria
        self.actions = [a for a in (criteria.actions if criteria else None) or [] if a.requestor == "user"]
        self.turn = 0
        self.acted = 0

    def get_init_state(self, message_history: list[Any] | None = None) -> Any:
        t = load_tau2()
        return t.UserState(system_messages=[], messages=list(message_history or []))

    def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
        t = load_tau2()
        incoming = list(getattr(message, "tool_messages", None) or [message])
        state.messages.extend(incoming)
        if incoming[0].role == "tool":  # the result of this user's own tool call
            reply = t.message.UserMessage(
                role="user", content="I did that. It says: " + " | ".join(m.content or "" for m in incoming)
            )
        else:
            reply = self._answer(t, (message.content or "").lower())
        state.messages.append(reply)
        return reply, state

    def _answer(self, t: Any, text: str) -> Any:
        if any(word in text for word in TRANSFER_WORDS):
            return t.message.UserMessage(role="user", content=t.TRANSFER)
        if self.acted < len(self.actions) and self.actions[self.acted].name.lower() in text:
            action = self.actions[self.acted]
            self.acted += 1
            call = t.message.ToolCall(
                id=f"user_{action.action_id}", name=action.name, arguments=dict(action.arguments), requestor="user"
            )
            return t.message.UserMessage(role="user", content=None, tool_calls=[call])
        content = self.lines[self.turn] if self.turn < len(self.lines) else t.STOP
        self.turn += 1
        return t.message.UserMessage(role="user", content=content)

    @classmethod
    def is_stop(cls, message: Any) -> bool:
        return load_tau2().UserSimulator.is_stop(message)

    def stop(self, message: Any = None, state: Any = None) -> None:
        """tau2's orchestrator calls this at the end of a run; nothing to release."""

    def set_seed(self, seed: int) -> None:
        """Deterministic already; accepted so tau2's orchestrator can seed it."""
