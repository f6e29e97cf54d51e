"""Drives an env for the checks: opens it lazily, turns every failure of the env
code into an EnvFault (data, never a crash), replays action lists as episodes,
and caches one reference-solution episode per seed for the checks that share it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gapforge.envs.protocol import Message, Score, StepResult
from gapforge.envs.sdk import ProtocolError, action_to_message
from gapforge.faults import EnvCodeFault
from gapforge.sandbox.errors import EnvCodeError, SandboxError


class ValidatedEnv(Protocol):
    """An Environment (envs.protocol) that also gives reference actions for a seed."""

    name: str

    def tools(self) -> list[dict[str, Any]]: ...
    def reset(self, task: int) -> list[Message]: ...
    def step(self, message: Message) -> StepResult: ...
    def score(self) -> Score: ...
    def solution(self, seed: int) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


OpenEnv = Callable[[], ValidatedEnv]


class EnvFault(EnvCodeFault):
    """The env code failed during a check: how (EnvCodeError kind), where, and its error text."""

    def __init__(
        self, kind: str, detail: str, *, phase: str, seed: int | None = None, action: str | None = None
    ) -> None:
        self.kind, self.detail, self.phase, self.seed, self.action = kind, detail, phase, seed, action
        super().__init__(self.describe())

    def describe(self) -> str:
        at = f" at seed {self.seed}" if self.seed is not None else ""
        after = f" (answering {self.action})" if self.action else ""
        return f"env {self.kind} in {self.phase}{at}{after}: {self.detail[:300]}"

    def evidence(self) -> dict[str, Any]:
        out = {"seed": self.seed, "phase": self.phase, "kind": self.kind, "error": self.detail[:1500]}
        return out | ({"action": self.action} if self.action else {})


@dataclass
class ReplayedEpisode:
    """One replayed action list: what the env said and how it scored it."""

    seed: int
    initial: list[Message]
    steps: list[StepResult] = field(default_factory=list)
    score: Score | None = None
    done_after: int | None = None  # index of the action after which the env said done
    calls: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name

    @property
    def reward(self) -> float:
        return self.score.reward if self.score else 0.0

    def tool_results(self) -> list[tuple[str, str | None]]:
        """(tool name, result content) of every tool result the env returned."""
        out = []
        for step in self.steps:
            for m in step.messages:
                if m.role == "tool":
                    out.append((m.name or self.calls.get(m.tool_call_id or "", "?"), m.content))
        return out

    def fingerprint(self) -> list[Any]:
        """What must be identical when the same seed gets the same actions (info dicts excluded)."""
        return [
            [m.model_dump(mode="json") for m in self.initial],
            [[[m.model_dump(mode="json") for m in s.messages], s.done] for s in self.steps],
            None if self.score is None else [round(self.score.reward, 9), self.score.success, self.score.components],
        ]


def describe_message(message: Message) -> str:
    """A short description of an assistant message, for evidence: `tool(args)` or `say "text"`."""
    if message.tool_calls:
        return ", ".join(f"{c.name}({json.dumps(c.arguments, sort_keys=True)[:150]})" for c in message.tool_calls)
    return f"say {json.dumps((message.content or '')[:100])}"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def action_message(action: Any, call_id: str) -> Message:
    """A reference action ({"tool", "arguments"} or {"say"}) as the assistant message that performs it
    (envs.sdk.action_to_message, the one conversion; a malformed action -> TypeError)."""
    try:
        return Message.model_validate(action_to_message(action, call_id))
    except ProtocolError as e:
        raise TypeError(str(e)) from None


class Probe:
    """Owns the env under test for one validation; a fault discards it so the next call gets a fresh one."""

    def __init__(self, open_env: OpenEnv) -> None:
        self._open = open_env
        self._env: ValidatedEnv | None = None
        self._references: dict[int, ReplayedEpisode | EnvFault] = {}
        self._solutions: dict[int, list[dict[str, Any]]] = {}

    # -- env lifecycle -------------------------------------------------
    def env(self) -> ValidatedEnv:
        if self._env is None:
            self._env = self.guard("load", None, self._open)
        return self._env

    def fresh(self) -> ValidatedEnv:
        self.discard()
        return self.env()

    def discard(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except SandboxError:
                raise
            except Exception:  # noqa: BLE001, S110 - a broken env's close() must not end validation
                pass

    def guard(self, phase: str, seed: int | None, fn: Callable[..., Any], *args: Any) -> Any:
        """Call env code; any failure of it becomes an EnvFault and the env is discarded.
        For step() the fault names the message being answered."""
        action = describe_message(args[0]) if phase == "step" and args and isinstance(args[0], Message) else None
        try:
            return fn(*args)
        except SandboxError:
            raise
        except EnvCodeError as e:
            fault = EnvFault(e.kind, e.detail, phase=e.method or phase, seed=seed, action=action)
        except Exception as e:  # noqa: BLE001 - trusted in-process envs raise anything; it is data
            kind = "exception" if phase != "load" else "load_error"
            fault = EnvFault(kind, f"{type(e).__name__}: {e}", phase=phase, seed=seed, action=action)
        self.discard()
        raise fault

    # -- episodes ----------------------------------------------------------
    def solution(self, seed: int, env: ValidatedEnv | None = None) -> list[dict[str, Any]]:
        actions = self.guard("solution", seed, (env or self.env()).solution, seed)
        if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
            raise EnvFault(
                "bad_output",
                f"solution() must return a list of actions, got {str(actions)[:200]}",
                phase="solution",
                seed=seed,
            )
        return actions

    def play(self, seed: int, actions: list[Any], env: ValidatedEnv | None = None) -> ReplayedEpisode:
        """reset(seed), one step per action until done, then score()."""
        target = env or self.env()
        initial = self.guard("reset", seed, target.reset, seed)
        episode = ReplayedEpisode(seed=seed, initial=list(initial))
        for i, action in enumerate(actions):
            try:
                message = action_message(action, f"call_{seed}_{i}")
            except TypeError as e:
                raise EnvFault("bad_output", f"action {i}: {e}", phase="solution", seed=seed) from None
            for call in message.tool_calls:
                episode.calls[call.id] = call.name
            result = self.guard("step", seed, target.step, message)
            episode.steps.append(result)
            if result.done:
                episode.done_after = i
                break
        episode.score = self.guard("score", seed, target.score)
        return episode

    def reference(self, seed: int) -> ReplayedEpisode:
        """The reference solution played once for `seed` (cached, faults included)."""
        if seed not in self._references:
            try:
                self._solutions[seed] = self.solution(seed)
                self._references[seed] = self.play(seed, self._solutions[seed])
            except EnvFault as fault:
                self._references[seed] = fault
        ref = self._references[seed]
        if isinstance(ref, EnvFault):
            raise ref
        return ref

    def reference_actions(self, seed: int) -> list[dict[str, Any]]:
        self.reference(seed)
        return self._solutions[seed]

    def close(self) -> None:
        self.discard()
