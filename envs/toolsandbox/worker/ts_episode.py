"""One ToolSandbox episode played by ToolSandbox's own `Scenario.play`, step by step (ToolSandbox venv only).

`play` runs in a thread; the agent role (`BridgeAgent`) parks that thread each
time ToolSandbox asks the agent, and hands ToolSandbox's OpenAI-format messages
to the worker's main thread, which answers the host. The ExecutionContext is a
process global, so a worker process serves one episode at a time and the main
thread touches the context only while the play thread is parked or finished.
"""

from __future__ import annotations

import queue
import re
import threading
import traceback
from typing import Any

from tool_sandbox.common.execution_context import DatabaseNamespace, RoleType, get_current_context
from tool_sandbox.common.scenario import Scenario
from tool_sandbox.roles.execution_environment import ExecutionEnvironment
from ts_roles import BridgeAgent

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Episode:
    """A scenario being played: `start()` -> first agent turn, `answer(message)` -> next turn or the end."""

    def __init__(self, name: str, scenario: Scenario, user: Any) -> None:
        self.name, self.scenario = name, scenario
        self._to_play: queue.Queue[dict[str, Any]] = queue.Queue()
        self._to_host: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.roles = {
            RoleType.AGENT: BridgeAgent(self._ask),
            RoleType.USER: user,
            RoleType.EXECUTION_ENVIRONMENT: ExecutionEnvironment(),
        }
        self.seen = 0  # OpenAI messages already shown to the host
        self.ids: dict[str, str] = {}  # ToolSandbox-side tool-call id -> the host's id
        self.done = False
        self.termination: str | None = None
        self.exception: dict[str, str] | None = None
        self._thread = threading.Thread(target=self._play, name=f"play-{name}", daemon=True)

    def _ask(self, messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
        self._to_host.put(("turn", (messages, tools)))
        answer = self._to_play.get()
        if answer.get("__stop__"):
            raise _Stopped()
        return answer

    def _play(self) -> None:
        try:
            self.scenario.play(self.roles, scenario_name=self.name)
            self._to_host.put(("end", None))
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 — an episode's failure is data (ToolSandbox scores it 0)
            self._to_host.put(("error", exc))

    def _wait(self) -> dict[str, Any]:
        kind, payload = self._to_host.get()
        if kind == "turn":
            messages, tools = payload
            new = [self._host_view(m) for m in messages[self.seen :]]
            first = self.seen == 0
            self.seen = len(messages) + 1  # + the assistant message the host answers with
            return {"messages": new, "tools": tools if first else None, "done": False}
        self.done = True
        if kind == "end":
            sandbox = get_current_context().get_database(DatabaseNamespace.SANDBOX)
            active = bool(sandbox["conversation_active"][-1])
            self.termination = "max_messages" if active else "user_end"
        else:
            exc = payload
            where = "user" if isinstance(exc, UserFailure) else "agent"
            self.termination = f"{where}_error"
            self.exception = {
                "type": type(exc).__name__,
                "message": str(exc)[:500],
                "traceback": "".join(traceback.format_exception(exc))[-4000:],
            }
        return {
            "messages": [],
            "tools": None,
            "done": True,
            "termination": self.termination,
            "exception": self.exception,
        }

    def start(self) -> dict[str, Any]:
        self._thread.start()
        return self._wait()

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.done:
            raise RuntimeError("the episode is over")
        self._to_play.put(self._play_view(message))
        return self._wait()

    def stop(self) -> None:
        if not self.done and self._thread.is_alive():
            self._to_play.put({"__stop__": True})
            self._thread.join(timeout=10)
        self.done = True

    def _play_view(self, message: dict[str, Any]) -> dict[str, Any]:
        """The host's assistant message with tool-call ids usable as Python names (ToolSandbox
        builds `<id>_parameters` variables from them); the original ids are restored on the way out."""
        calls = []
        for i, call in enumerate(message.get("tool_calls") or []):
            cid = str(call.get("id") or "")
            inner = cid if _IDENT.match(cid) and cid not in self.ids else f"call_gf{len(self.ids)}_{i}"
            self.ids[inner] = cid
            calls.append({**call, "id": inner})
        return {"role": "assistant", "content": message.get("content"), "tool_calls": calls}

    def _host_view(self, m: dict[str, Any]) -> dict[str, Any]:
        out = {"role": m["role"], "content": m.get("content")}
        if m["role"] == "tool":
            out["tool_call_id"] = self.ids.get(m["tool_call_id"], m["tool_call_id"])
            out["name"] = m.get("name")
        return out

    def evaluate(self) -> dict[str, Any]:
        """ToolSandbox's evaluator on the context so far; an episode that raised scores 0 as its CLI records it."""
        result = self.scenario.evaluation.evaluate(
            execution_context=get_current_context(), max_turn_count=self.scenario.max_messages
        )
        out = {
            **similarities(result),
            "milestone_mapping": {str(k): list(v) for k, v in result.milestone_mapping.items()},
            "minefield_mapping": {str(k): list(v) for k, v in result.minefield_mapping.items()},
            "exception": self.exception,
        }
        if self.exception is not None:
            out.update(failed_play(self.scenario.max_messages), milestone_mapping={}, minefield_mapping={})
        return out


def similarities(result: Any) -> dict[str, Any]:
    """A ToolSandbox EvaluationResult's numbers, as the host reads them."""
    names = ("similarity", "milestone_similarity", "minefield_similarity")
    return {**{n: float(getattr(result, n)) for n in names}, "turn_count": int(result.turn_count)}


def failed_play(max_messages: int) -> dict[str, Any]:
    """tool_sandbox.cli.utils.run_scenario's rule: a play that raised scores 0 at the message limit."""
    return {"similarity": 0.0, "milestone_similarity": 0.0, "minefield_similarity": 0.0, "turn_count": max_messages}


class _Stopped(BaseException):
    """Unwinds a parked play thread when the host abandons the episode."""


class UserFailure(Exception):
    """The user simulator (e.g. its endpoint) failed; blamed on the user, not the agent."""


class GuardedUser:
    """Wraps a user role so its failures are told apart from the agent's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def respond(self, ending_index: int | None = None) -> None:
        try:
            self.inner.respond(ending_index=ending_index)
        except Exception as exc:
            raise UserFailure(f"{type(exc).__name__}: {exc}") from exc

    def teardown(self) -> None:
        self.inner.teardown()
