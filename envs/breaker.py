"""A circuit breaker for one endpoint: stop hammering a server that is down.

After `failures` consecutive failed requests the circuit opens: every call fails at once with CircuitOpen for
`cooldown_s`; then one probe is let through (half-open): its success closes the circuit, its failure reopens it.
Callers share one breaker per endpoint base URL process-wide (`breaker_for(base_url, ...)`: serving's EndpointPolicy,
agents' RetryingChatOpenAI and StructuredHTTP), so an outage costs about `failures` requests, not episodes x retries.
A client wraps each HTTP attempt in `with breaker.attempt(is_failure): ...`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gapforge.faults import EndpointFault


class CircuitOpen(EndpointFault):
    """The endpoint is considered down; the message says since when and when it is tried again.
    `probing`: the cooldown is over and another caller's probe is under way, so a retry after a
    short backoff is worth it (the retry rules treat only this case as transient)."""

    def __init__(self, message: str, *, probing: bool = False) -> None:
        super().__init__(message)
        self.probing = probing


class CircuitBreaker:
    def __init__(
        self, name: str, *, failures: int = 8, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1 or cooldown_s < 0:
            raise ValueError(f"circuit breaker needs failures >= 1 and cooldown_s >= 0, got {failures}, {cooldown_s}")
        self.name = name
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing = False
        self.last_error = ""
        self.opened = 0  # how many times the circuit opened (for reports and tests)

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._opened_at is not None

    def check(self) -> None:
        """Raise CircuitOpen unless a request may go out now."""
        with self._lock:
            if self._opened_at is None:
                return
            left = self._opened_at + self.cooldown_s - self._clock()
            if left <= 0 and not self._probing:
                self._probing = True  # half-open: this caller is the probe
                return
            probing = left <= 0
            when = "a probe request is under way" if probing else f"not trying again for {left:.0f}s"
            raise CircuitOpen(
                f"{self.name} is down ({self._consecutive} consecutive failures, last: {self.last_error[:200]}); {when}",
                probing=probing,
            )

    def success(self) -> None:
        with self._lock:
            self._consecutive, self._opened_at, self._probing = 0, None, False

    def abandon(self) -> None:
        """An attempt ended without a verdict (cancelled): a probe slot is freed for the next caller."""
        with self._lock:
            self._probing = False

    @contextmanager
    def attempt(self, is_failure: Callable[[BaseException], bool]) -> Iterator[None]:
        """One request: CircuitOpen if it may not go out; its outcome is recorded. An exception
        `is_failure` accepts counts against the endpoint; any other Exception means the server
        answered (e.g. HTTP 400), so it is up; a cancellation gives no verdict."""
        self.check()
        try:
            yield
        except Exception as e:
            if is_failure(e):
                kind = "" if type(e).__name__.startswith("_") else f"{type(e).__name__}: "
                self.failure(kind + " ".join(str(e).split())[:300])
            else:
                self.success()
            raise
        except BaseException:
            self.abandon()
            raise
        self.success()

    def failure(self, error: str) -> None:
        with self._lock:
            self._consecutive += 1
            self.last_error = error
            if self._probing or (self._opened_at is None and self._consecutive >= self.threshold):
                if self._opened_at is None:
                    self.opened += 1
                self._opened_at, self._probing = self._clock(), False


_BREAKERS: dict[str, CircuitBreaker] = {}
_REGISTRY_LOCK = threading.Lock()


def breaker_for(base_url: str, *, failures: int = 8, cooldown_s: float = 30.0) -> CircuitBreaker:
    """The process-wide breaker of the endpoint at `base_url` (trailing '/' ignored), so every
    client of one endpoint (policy, analyst, generator, judge) sees the same outage. Its
    threshold and cooldown are the latest asker's (one endpoint is configured once)."""
    key = base_url.rstrip("/")
    with _REGISTRY_LOCK:
        breaker = _BREAKERS.get(key)
        if breaker is None:
            breaker = _BREAKERS[key] = CircuitBreaker(f"endpoint {key}", failures=failures, cooldown_s=cooldown_s)
        elif (breaker.threshold, breaker.cooldown_s) != (failures, cooldown_s):
            if failures < 1 or cooldown_s < 0:
                raise ValueError(
                    f"circuit breaker needs failures >= 1 and cooldown_s >= 0, got {failures}, {cooldown_s}"
                )
            breaker.threshold, breaker.cooldown_s = failures, cooldown_s
        return breaker


def reset_breakers() -> None:
    """Forget every endpoint's state (tests: a reused local port is a new endpoint)."""
    with _REGISTRY_LOCK:
        _BREAKERS.clear()
