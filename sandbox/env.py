"""SandboxedEnv: any synthetic env module behind the one Environment protocol,
running in the sandbox. The validator, the trainer and the evaluator all use it.

A failing env is data: every env failure is raised as EnvCodeError (kind,
detail, traceback) for the caller to record. After a failure that killed the
sandbox, the next `reset()` transparently leases a fresh one; `step`/`score`
without a new reset raise EnvCodeError(kind="crash"). After `close()` every call
raises the sandbox's own SandboxError.

A sandbox lost to something that is not the env's doing (container killed or
removed from outside, daemon gone: SandboxLost) is not an env failure: the call
is retried on a fresh sandbox, replaying the episode so far (reset + steps), up
to `infra_retries` times; the evidence goes to `sandbox_faults` (kind, detail,
the call that was lost, the calls replayed on the fresh sandbox, whether it was
the last try), never to `failures`. When it persists, SandboxLost (a SandboxError)
propagates.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gapforge.envs.naming import synthetic_env_name
from gapforge.envs.protocol import Message, Score, StepResult, TaskRef, seed_of
from gapforge.sandbox.channel import Channel
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.errors import EnvCodeError, SandboxError, SandboxLost
from gapforge.sandbox.pool import SandboxPool


class SandboxedEnv:
    """Implements envs.protocol.Environment, plus `solution`, `scenario` and `describe`.

    Two ways to hold one:
    - `SandboxedEnv.pooled(module, pool)`: for a trainer or evaluator that keeps the env
      for thousands of episodes. The pool is the caller's (never closed here); the
      sandbox is leased lazily on first use (normally `reset`) and kept across resets.
    - `SandboxedEnv(module, cfg, pool=None)`: leases at once (a load error raises here);
      without a pool it makes a private one and closes it on `close()`.

    `failures` keeps the last `max_failures` env failures (bounded; `failure_count`
    counts all). After `close()` every call raises SandboxError.
    """

    def __init__(
        self,
        module_path: str | Path,
        cfg: SandboxConfig | None = None,
        pool: SandboxPool | None = None,
        *,
        lazy: bool = False,
        max_failures: int = 100,
        infra_retries: int = 2,
    ) -> None:
        if cfg is None and pool is None:
            raise ValueError("SandboxedEnv needs a SandboxConfig or a SandboxPool")
        self.module_path = Path(module_path)
        self.cfg = cfg if cfg is not None else pool.cfg  # type: ignore[union-attr]
        self._own_pool = pool is None
        self.pool = pool if pool is not None else SandboxPool(self.cfg, size=0, sweep_on_start=False)
        self._channel: Channel | None = None
        self._info: dict[str, Any] | None = None
        self._episode_lost = False
        self._closed = False
        self.failures: deque[dict[str, Any]] = deque(maxlen=max_failures)  # evidence of recent env failures
        self.failure_count = 0
        self.sandbox_faults: deque[dict[str, Any]] = deque(maxlen=max_failures)  # sandboxes lost to outside causes
        self.infra_retries = infra_retries
        self._journal: list[tuple[str, dict[str, Any] | None]] = []  # the episode so far, for a replay
        self._lost = False  # the sandbox was lost (not the env's doing): the next call replays the episode
        if not lazy:
            try:
                self._lease()
            except BaseException:
                if self._own_pool:
                    self.pool.close()
                raise

    @classmethod
    def pooled(cls, module_path: str | Path, pool: SandboxPool, *, max_failures: int = 100) -> SandboxedEnv:
        """A long-lived env on a caller-owned pool; its sandbox is leased on first use."""
        return cls(module_path, pool=pool, lazy=True, max_failures=max_failures)

    @property
    def name(self) -> str:
        """`synthetic:<capability>` (envs.naming): the same name in-process and sandboxed."""
        info = self._info if self._info is not None else self._lease_info()
        return synthetic_env_name(info.get("capability"), self.module_path)

    # -- plumbing ------------------------------------------------------------
    def _record(self, e: EnvCodeError) -> None:
        self.failures.append(e.to_dict())
        self.failure_count += 1

    def _lease(self) -> Channel:
        for attempt in range(self.infra_retries + 1):
            try:
                self._channel, self._info = self.pool.acquire(self.module_path)
                break
            except EnvCodeError as e:
                self._record(e)
                raise
            except SandboxLost as e:
                self.sandbox_faults.append(
                    e.to_dict()
                    | {"lost_call": "start", "replayed": "nothing", "gave_up": attempt >= self.infra_retries}
                )
                if attempt >= self.infra_retries:
                    raise
        self._episode_lost = False
        return self._channel  # type: ignore[return-value]

    def _lease_info(self) -> dict[str, Any]:
        self._check_open()
        self._lease()
        return self._info or {}

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"SandboxedEnv {self.module_path.name} is closed: open a new one")

    def _call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self._check_open()
        for attempt in range(self.infra_retries + 1):
            replay = self._lost and method != "reset"
            if self._channel is None:
                if self._episode_lost and method != "reset":
                    raise EnvCodeError(
                        "crash",
                        "the episode was lost when the sandbox was destroyed after a failure; reset() again",
                        method=method,
                    )
                self._lease()
            channel = self._channel
            assert channel is not None
            try:
                if replay:
                    for m, p in self._journal:
                        channel.call(m, p)
                self._lost = False
                out = channel.call(method, params)
            except SandboxLost as e:  # not the env's doing: a fresh sandbox, the episode replayed
                steps = sum(1 for m, _ in self._journal if m == "step")
                replayed = (
                    f"reset + {steps} step(s), then {method}()"
                    if method != "reset" and self._journal
                    else f"{method}()"
                )
                self.sandbox_faults.append(
                    e.to_dict() | {"lost_call": method, "replayed": replayed, "gave_up": attempt >= self.infra_retries}
                )
                self.pool.discard(channel)
                self._channel, self._lost = None, True
                if attempt >= self.infra_retries:
                    raise
                continue
            except EnvCodeError as raised:
                e = raised.naming(self.module_path)
                self._record(e)
                if channel.broken is not None:
                    self.pool.discard(channel)
                    self._channel, self._journal = None, []
                    self._episode_lost = True
                raise e from None
            if method == "reset":
                self._journal = [("reset", params)]
            elif method == "step":
                self._journal.append(("step", params))
            return out
        raise AssertionError("unreachable")

    def _bad_output(self, method: str, err: Exception) -> EnvCodeError:
        detail = str(err).splitlines()
        exc = EnvCodeError(
            "bad_output", f"answer does not fit the protocol: {' '.join(detail[:3])[:500]}", method=method
        )
        self._record(exc)
        if self._channel is not None:
            self._channel.had_failure = True
        return exc

    # -- Environment protocol --------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        out = self._call("tools")
        if not isinstance(out, list) or not all(isinstance(t, dict) for t in out):
            raise self._bad_output("tools", TypeError(f"tools() must return a list of dicts, got {type(out).__name__}"))
        return out

    def reset(self, task: TaskRef) -> list[Message]:
        out = self._call("reset", {"seed": seed_of(task)})
        try:
            if not isinstance(out, list):
                raise TypeError(f"reset() must return a list of messages, got {type(out).__name__}")
            return [Message.model_validate(m) for m in out]
        except (ValidationError, TypeError) as e:
            raise self._bad_output("reset", e) from None

    def step(self, message: Message) -> StepResult:
        out = self._call("step", {"message": message.model_dump(mode="json")})
        try:
            return StepResult.model_validate(out)
        except ValidationError as e:
            raise self._bad_output("step", e) from None

    def score(self) -> Score:
        out = self._call("score")
        try:
            return Score.model_validate(out)
        except ValidationError as e:
            raise self._bad_output("score", e) from None

    # -- extras for the validator ----------------------------------------------
    def solution(self, seed: int) -> list[dict[str, Any]]:
        out = self._call("solution", {"seed": int(seed)})
        if not isinstance(out, list) or not all(isinstance(a, dict) for a in out):
            raise self._bad_output("solution", TypeError("solution() must return a list of action dicts"))
        return out

    def scenario(self, seed: int) -> dict[str, Any]:
        """The JSON scenario the module generates for `seed` (determinism/diversity checks)."""
        out = self._call("scenario", {"seed": int(seed)})
        if not isinstance(out, dict):
            raise self._bad_output("scenario", TypeError("scenario_for() must return a dict"))
        return out

    @property
    def sandbox_id(self) -> str | None:
        """The current container id (or process id); None after a fatal failure."""
        return self._channel.ident if self._channel is not None else None

    def describe(self) -> dict[str, Any]:
        return dict(self._info if self._info is not None else self._lease_info())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            self.pool.release(self._channel)
            self._channel = None
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "SandboxedEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_env(module_path: str | Path, cfg: SandboxConfig, pool: SandboxPool | None = None) -> SandboxedEnv:
    """The one factory: the backend (docker | process) comes from `cfg.backend`."""
    if pool is not None and pool.cfg.backend != cfg.backend:
        raise ValueError(f"pool backend {pool.cfg.backend!r} differs from cfg.backend {cfg.backend!r}")
    return SandboxedEnv(module_path, cfg, pool)
