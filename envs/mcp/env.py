"""McpTargetEnv: an MCP tool server plus a YAML task file behind envs.protocol.TargetEnvironment (the episode and
its failures: envs/mcp/README.md). One env instance owns one server connection and plays one episode at a time.
"""

from __future__ import annotations

import json
from typing import Any

from gapforge.envs.errors import EnvError
from gapforge.envs.mcp import pool
from gapforge.envs.mcp.checks import score_task
from gapforge.envs.mcp.client import CallOutcome, Connection
from gapforge.envs.mcp.errors import ServerFailure, ServerStartError, TaskFileError
from gapforge.envs.mcp.spec import Target, TaskSpec, load_target, tool_problem
from gapforge.envs.mcp.user import LLMUser, ScriptedUser, SimulatedUser
from gapforge.envs.protocol import USER_TOKENS, Message, Score, StepResult, TaskRef

URL_WAIT_S = 600.0  # how long an env waits for another env instance's episode on the same URL server


class McpTargetEnv:
    """A target from an MCP server and its task file (`mcp:PATH.yaml`). user: "scripted" or "llm" (pass `user_model`,
    a LangChain chat model)."""

    inline = False  # every call blocks on the server's pipe or socket

    def __init__(self, path: str, *, user: str = "scripted", user_model: Any = None) -> None:
        if user not in ("scripted", "llm"):
            raise EnvError(f"unknown user '{user}' for env mcp:{path}: use 'scripted' or 'llm'")
        if user == "llm" and user_model is None:
            raise EnvError(f"env mcp:{path} with user='llm' needs a user model: configure the user simulator endpoint")
        self.target: Target = load_target(path)
        spec = self.target.spec
        self.name = f"mcp:{spec.name}"
        self.user_kind, self.user_model = user, user_model
        self._restart = spec.reset.mode == "restart"
        self._key = self.target.server_key()
        self._conn = self._connect()
        offered = {t.name for t in self._conn.tools}
        writes = {
            t.name for t in self._conn.tools if t.annotations is not None and t.annotations.read_only_hint is False
        }
        problem = tool_problem(self.target, offered, writes)
        if problem:
            self._conn.close()
            raise TaskFileError(problem)
        hidden = set(spec.hide) | ({spec.reset.tool} if spec.reset.tool else set())
        self._offered = offered - hidden
        self._tools_json = json.dumps([_schema(t) for t in self._conn.tools if t.name in self._offered])
        self._url_lock = pool.url_lock(spec.server.url) if spec.server.url else None
        self._holds_url = False
        self._task: TaskSpec | None = None
        self._closed = False

    def task_ids(self) -> list[str]:
        return [t.id for t in self.target.spec.tasks]

    def task_family(self, task_id: str) -> str:
        return self._get_task(task_id).family

    def tools(self) -> list[dict[str, Any]]:
        return json.loads(self._tools_json)

    def reset(self, task: TaskRef) -> list[Message]:
        t = self._get_task(str(task))
        self._check_open()
        self._hold_url()
        self._fresh_state()
        self._task = t
        self._user: SimulatedUser = LLMUser(self.user_model, t) if self.user_kind == "llm" else ScriptedUser(t)
        self._messages = [Message.system(self.target.policy), Message.user(self._user.opening())]
        self._done = False
        return list(self._messages)

    def step(self, message: Message) -> StepResult:
        if self._task is None:
            raise EnvError(f"env {self.name}: call reset(task) before step()")
        if message.role != "assistant":
            raise EnvError(f"env {self.name}: step() takes an assistant message, got role '{message.role}'")
        self._check_open()
        if self._done:
            return StepResult(done=True, info={"termination": "user_stop"})
        self._messages.append(message)
        if message.tool_calls:
            out = [self._run_tool(tc.id, tc.name, tc.arguments) for tc in message.tool_calls]
            self._messages += out
            return StepResult(messages=out)
        text, stop = self._user.reply(message.content or "")
        reply = Message.user(text)
        self._messages.append(reply)
        self._done = stop
        return StepResult(messages=[reply], done=stop, info={"termination": "user_stop"} if stop else {})

    def score(self) -> Score:
        if self._task is None:
            raise EnvError(f"env {self.name}: call reset(task) before score()")
        self._check_open()
        t = self._task
        info: dict[str, Any] = {"family": t.family, "user": self.user_kind}
        if isinstance(self._user, LLMUser):
            info["user_prompt"] = self._user.prompt_id
            info[USER_TOKENS] = list(self._user.tokens)
        grader = self.target.graders.get(t.success.grader) if t.success.grader else None
        return score_task(
            t,
            call_tool=self._conn.call,
            messages=self._messages,
            grader=grader,
            info=info,
            rule=self.target.spec.reward,
        )

    def close(self) -> None:
        """Give the server back (parked for the next env when it is reset by a tool, healthy and no abandoned call is still
        on it: pool.park; else ended)."""
        if self._closed:
            return
        self._closed = True
        if self._restart:
            self._conn.close()
        else:
            pool.park(self._key, self._conn)
        if self._holds_url and self._url_lock is not None:
            self._holds_url = False
            self._url_lock.release()

    def _get_task(self, task_id: str) -> TaskSpec:
        task = self.target.tasks.get(task_id)
        if task is None:
            raise EnvError(
                f"unknown task '{task_id}' in env {self.name}: see `gapforge rollouts tasks mcp:{self.target.path}`"
            )
        return task

    def _check_open(self) -> None:
        if self._closed:
            raise EnvError(f"env {self.name} is closed: make a new one")

    def _connect(self) -> Connection:
        if not self._restart:
            parked = pool.take(self._key)
            if parked is not None:
                return parked
        s = self.target.spec.server
        return Connection(
            label=f"env mcp:{self.target.spec.name}",
            argv=self.target.argv,
            cwd=self.target.cwd,
            env=s.env,
            url=s.url,
            startup_timeout_s=s.startup_timeout_s,
            call_timeout_s=s.call_timeout_s,
        )

    def _hold_url(self) -> None:
        if self._url_lock is None or self._holds_url:
            return
        if not self._url_lock.acquire(timeout=URL_WAIT_S):
            raise ServerFailure(
                f"env {self.name}: another episode held the URL server {self.target.spec.server.url} for "
                f"{URL_WAIT_S:g} s (one episode at a time per URL server): close the envs you are done with"
            )
        self._holds_url = True

    def _fresh_state(self) -> None:
        reset = self.target.spec.reset
        if self._restart:
            if self._conn.calls or not self._conn.alive:  # a server nobody has called yet is as fresh as a new one
                self._conn.close()
                try:
                    self._conn = self._connect()
                except ServerStartError as err:  # it started for this env before: now it is the episode's env_error
                    raise ServerFailure(
                        f"env {self.name}: restarting the server for a fresh state failed: {err}"
                    ) from None
            return
        assert reset.tool is not None
        outcome = self._conn.call(reset.tool, dict(reset.arguments))
        if outcome.is_error:
            raise ServerFailure(f"env {self.name}: the reset tool '{reset.tool}' failed: {outcome.text[:200]}")

    def _run_tool(self, call_id: str, name: str, arguments: dict[str, Any]) -> Message:
        if name not in self._offered:
            return Message.tool(call_id, f"Error: unknown tool '{name}'", name=name)
        outcome: CallOutcome = self._conn.call(name, arguments)
        text = f"Error: {outcome.text}" if outcome.is_error else outcome.text
        return Message.tool(call_id, text, name=name)


def _schema(tool: Any) -> dict[str, Any]:
    """An MCP tool as an OpenAI function schema (its input schema as the parameters)."""
    params = dict(tool.input_schema or {})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    params.pop("title", None)
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or tool.title or tool.name,
            "parameters": params,
        },
    }
