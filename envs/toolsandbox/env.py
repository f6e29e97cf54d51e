"""ToolSandboxEnv: Apple's ToolSandbox behind gapforge's TargetEnvironment protocol.

An episode is ToolSandbox's own `Scenario.play` running in this env's worker
process (worker/ts_episode.py): the agent role hands ToolSandbox's OpenAI-format
messages out and takes the policy's assistant message back, tool calls run in
ToolSandbox's execution environment (Python code in its interactive console, so
tool results are Python reprs), text goes to the user role, and the user ends the
episode with `end_conversation` (or ToolSandbox's max-messages limit does).
`score()` is ToolSandbox's `Evaluation.evaluate` (milestones / minefields).

User simulators (both run inside the worker, worker/ts_roles.py): scripted, or ToolSandbox's `OpenAIAPIUser` (its
user instruction and few-shot examples come with each scenario) on the configured OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
import os
import re
import threading
import zlib
from pathlib import Path
from typing import Any

from gapforge.envs.errors import EnvError, SimulatorEndpointError
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef
from gapforge.envs.toolsandbox.runtime import WORKER, WorkerProcess, toolsandbox_python
from gapforge.envs.user_endpoint import coerce_endpoint, endpoint_down
from gapforge.faults import EnvCodeFault

NETWORK_MODES = ("off", "stand-in")  # stand-in: RapidAPI answers from worker/standin_rapidapi.json (not recorded)
_CATALOG: dict[str, Any] | None = None
_CATALOG_LOCK = threading.Lock()


def catalog(worker: WorkerProcess | None = None) -> dict[str, Any]:
    """ToolSandbox's base-scenario catalogue (names, categories, tools, schemas).

    Static for an installed ToolSandbox, so it is cached in memory and next to
    ToolSandbox's venv (keyed by the venv's install stamp); a worker builds it once.
    """
    global _CATALOG
    with _CATALOG_LOCK:
        if _CATALOG is None:
            _CATALOG = _cached_catalog() or _fresh_catalog(worker)
        return _CATALOG


def _cache_path() -> tuple[Path, str] | None:
    python = toolsandbox_python()
    if python is None:
        return None
    venv = python.parent.parent
    stamp = venv / ".installed"
    key = stamp.read_text() if stamp.exists() else f"unstamped {python}"
    return venv / ".gapforge-catalog.json", key


def _cached_catalog() -> dict[str, Any] | None:
    where = _cache_path()
    if where is None or not where[0].exists():
        return None
    try:
        data = json.loads(where[0].read_text())
    except (OSError, ValueError):
        return None
    return data["catalog"] if isinstance(data, dict) and data.get("key") == where[1] else None


def _fresh_catalog(worker: WorkerProcess | None) -> dict[str, Any]:
    w = worker or WorkerProcess()
    try:
        fresh = w.call("catalog")
    finally:
        if worker is None:
            w.close()
    where = _cache_path()
    if where is not None:
        try:
            tmp = where[0].with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": where[1], "catalog": fresh}))
            tmp.replace(where[0])
        except OSError:
            pass  # a read-only venv: rebuild next time
    return fresh


def categories() -> list[str]:
    """The categories `toolsandbox:<category>` accepts (ToolSandbox's scenario categories, lower case)."""
    return sorted({c for s in catalog()["scenarios"] for c in s["categories"]})


def user_spec(kind: str, user_model: Any, replies: list[str] | None = None) -> dict[str, Any]:
    """The worker's user description (wire format)."""
    if kind == "scripted":
        return {"kind": "scripted", "replies": list(replies or [])}
    endpoint = coerce_endpoint(user_model, "ToolSandbox user simulator")
    return {
        "kind": "llm",
        "model": endpoint.model,
        "base_url": endpoint.base_url,
        "api_key": endpoint.secret(),
        "timeout_s": endpoint.timeout_s,
        "max_retries": endpoint.max_retries,
    }


class UserSimulatorError(EnvCodeFault, RuntimeError):
    """The user simulator (its endpoint) failed during an episode."""


class ToolSandboxEnv:
    """ToolSandbox's base scenarios, optionally one category (e.g. "state_dependency").

    user="scripted" (offline; `replies` answered in order to the agent's text turns,
    then `end_conversation`) or "llm" (ToolSandbox's LLM user; `user_model` = an
    OpenAI-compatible endpoint). network="off" excludes the scenarios whose allowed
    tools call RapidAPI (see `excluded()`); network="stand-in" runs them with
    ToolSandbox's RapidAPI requests answered from stand-in data written from the
    scenarios' milestones (worker/ts_standin.py; named `toolsandbox[:category]?network=stand-in`,
    marked in every score's info; not comparable to live RapidAPI runs).
    `seed` seeds each episode's tool order.
    """

    worker_script = WORKER  # what each episode's worker process runs (a subclass may run one that extends it)

    def __init__(
        self,
        category: str | None = None,
        *,
        user: str = "scripted",
        user_model: Any = None,
        network: str = "off",
        seed: int = 0,
        replies: list[str] | None = None,
    ) -> None:
        self.name = (
            "toolsandbox" + (f":{category}" if category else "") + (f"?network={network}" if network != "off" else "")
        )
        if network not in NETWORK_MODES:
            raise EnvError(
                f"{self.name}: network mode {network!r} is not supported; use 'off' (RapidAPI-backed scenarios excluded) "
                "or 'stand-in' (their answers from stand-in data, not comparable to live runs)"
            )
        self.network = network
        if user not in ("scripted", "llm"):
            raise EnvError(f"unknown user simulator {user!r} for {self.name}; choose 'scripted' or 'llm'")
        self._user = user_spec(user, user_model, replies)
        self.seed = int(seed)
        self._worker: WorkerProcess | None = None
        cat = catalog()
        known = sorted({c for s in cat["scenarios"] for c in s["categories"]})
        if category is not None and category not in known:
            raise EnvError(
                f"unknown ToolSandbox category {category!r} in env {self.name!r}: use one of {', '.join(known)}"
            )
        chosen = [s for s in cat["scenarios"] if category is None or category in s["categories"]]
        offline = network == "off"
        self._scenarios = {s["name"]: s for s in chosen if not (offline and s["network_tools"])}
        self._excluded = {s["name"]: s["network_tools"] for s in chosen if offline and s["network_tools"]}
        self._schemas = cat["tool_schemas"]
        self._tools: list[dict[str, Any]] | None = None
        self._task: str | None = None
        self._done = False
        self._ended: str | None = None

    def task_ids(self) -> list[str]:
        return sorted(self._scenarios)

    def excluded(self) -> dict[str, list[str]]:
        """Scenarios left out because their allowed tools need the internet (name -> those tools); none with network="stand-in"."""
        return dict(self._excluded)

    def task_family(self, task_id: str) -> str:
        """The ToolSandbox scenario module that defines the task (single_tool_call, multiple_tool_call, multiple_user_turn, insufficient_information)."""
        return str(self._entry(task_id)["module"])

    def task_categories(self, task_id: str) -> list[str]:
        return list(self._entry(task_id)["categories"])

    def network_tools(self, task_id: str) -> list[str]:
        """The task's allowed tools that call RapidAPI (answered from stand-in data with network="stand-in")."""
        return list(self._entry(task_id)["network_tools"])

    def _entry(self, task_id: TaskRef) -> dict[str, Any]:
        key = str(task_id)
        if key in self._scenarios:
            return self._scenarios[key]
        if key in self._excluded:
            raise EnvError(
                f"ToolSandbox scenario {key!r} needs network tools ({', '.join(self._excluded[key])}), excluded with network='off'; "
                f"use env '{self.name}?network=stand-in' for stand-in answers (not comparable to live runs)"
            )
        raise EnvError(f"unknown task id {key!r} for {self.name} ({len(self._scenarios)} scenarios; see task_ids())")

    def tools(self) -> list[dict[str, Any]]:
        """The episode's allowed tools (ToolSandbox's schemas); before reset, every tool some task allows."""
        if self._tools is not None:
            return self._tools
        names = sorted({t for s in self._scenarios.values() for t in s["tools"]})
        return [self._schemas[n] for n in names]

    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is None or self._worker.broken is not None:
            if self._worker is not None:
                self._worker.close()
            self._worker = WorkerProcess(script=self.worker_script)
        return self._worker

    def episode_seed(self, task_id: str) -> int:
        return zlib.crc32(f"{self.seed}:{task_id}".encode())

    def _call_on(self, method: str, task: TaskRef, **params: Any) -> Any:
        """The worker's `method` on the task's scenario (its name, defining module and episode seed)."""
        entry = self._entry(task)
        seed = self.episode_seed(entry["name"])
        return self._ensure_worker().call(method, scenario=entry["name"], module=entry["module"], seed=seed, **params)

    def reset(self, task: TaskRef) -> list[Message]:
        entry = self._entry(task)
        out = self._call_on("reset", task, user=self._user, network=self.network)
        self._task, self._done, self._ended = entry["name"], bool(out["done"]), out.get("termination")
        if out["done"]:
            self._raise_if_user_failed(out)
            raise EnvError(
                f"{self.name} task {entry['name']!r} ended before the agent's first turn ({out.get('termination')})"
            )
        self._tools = out["tools"] or []
        return [self._message(m) for m in out["messages"]]

    def step(self, message: Message) -> StepResult:
        if self._task is None:
            raise EnvError(f"{self.name}: call reset(task) before step()")
        if self._done:
            raise EnvError(f"{self.name}: the episode is over ({self._ended}); call reset(task) for a new one")
        if message.role != "assistant":
            raise EnvError(f"{self.name}: step() takes the assistant's message, got role {message.role!r}")
        wire = message.to_openai()
        out = self._ensure_worker().call("step", message=wire)
        messages = [self._message(m) for m in out["messages"]]
        if not out["done"]:
            return StepResult(messages=messages)
        self._done, self._ended = True, out.get("termination")
        self._raise_if_user_failed(out)
        info: dict[str, Any] = {"termination": self._ended}
        if out.get("exception"):
            exc = out["exception"]
            info["exception"] = f"{exc['type']}: {exc['message']}"
            # ToolSandbox raised on the agent's message before running any of its calls.
            messages = [
                Message.tool(c.id, f"Error: not executed; {exc['type']}: {exc['message']}", name=c.name)
                for c in message.tool_calls
            ]
        return StepResult(messages=messages, done=True, info=info)

    def _raise_if_user_failed(self, out: dict[str, Any]) -> None:
        if out.get("termination") == "user_error":
            where = self._user.get("base_url") or ("OpenAI's API" if self._user["kind"] == "llm" else "scripted user")
            message = (out.get("exception") or {}).get("message", "")  # "<the client's error class>: <its text>"
            retried = re.search(r"raised (\w+)>", message)  # ToolSandbox's user retries with tenacity: RetryError[...]
            if retried:
                message = f"{retried.group(1)} (after ToolSandbox's own retries)"
            down = endpoint_down(message.partition(" ")[0].partition(":")[0])
            raise (SimulatorEndpointError if down else UserSimulatorError)(
                f"{self.name}: user simulator at {where} failed: {message[:300]}"
            )

    @staticmethod
    def _message(m: dict[str, Any]) -> Message:
        if m["role"] == "tool":
            return Message.tool(m["tool_call_id"], m.get("content") or "", name=m.get("name"))
        return Message(role=m["role"], content=m.get("content") or "")

    def score(self) -> Score:
        """ToolSandbox's evaluator on the episode so far: reward = similarity, success = similarity == 1."""
        if self._task is None:
            raise EnvError(f"{self.name}: call reset(task) before score()")
        r = self._ensure_worker().call("score")
        similarity = min(1.0, max(0.0, float(r["similarity"])))
        info = {
            "evaluator": "tool_sandbox.Evaluation.evaluate",
            "scenario": self._task,
            "termination": self._ended or "in_progress",
            "similarity": similarity,
            **{k: r[k] for k in ("turn_count", "milestone_mapping", "minefield_mapping")},
            "categories": self._scenarios[self._task]["categories"],
            "network": self.network,
        }
        if self.network == "stand-in":  # which tool answers came from the stand-in data, not live RapidAPI
            info["stand_in_network"] = r.get("stand_in_network") or {"calls": 0, "misses": 0}
            info["comparable_to_live"] = False
        if r.get("exception"):
            info["exception"] = f"{r['exception']['type']}: {r['exception']['message']}"
        components = {
            "milestones": min(1.0, max(0.0, float(r["milestone_similarity"]))),
            "minefields_avoided": float(r["minefield_similarity"] == 0),
        }
        return Score(reward=similarity, success=similarity == 1.0, components=components, info=info)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        self._task, self._tools = None, None
