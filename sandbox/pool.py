"""A warm pool of sandboxes (containers, or rlimited processes when so configured).

`acquire(module)` hands out a sandbox with the module loaded: first an idle
one that already serves that exact module (healthy, returned by `release`),
else a pre-started blank one, else a cold start. A background thread keeps
`size` blank sandboxes ready. A sandbox serves one module for its whole life
(see sandbox/server.py); one that had any failure is destroyed, never reused.
`close()` (also registered with atexit) destroys everything; `sweep()` removes
labelled containers left by dead processes. No cleanup in __del__.
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Any

from gapforge.sandbox.channel import Channel
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.errors import EnvCodeError, SandboxError
from gapforge.sandbox.mount import Mount


class SandboxPool:
    def __init__(
        self, cfg: SandboxConfig, *, size: int | None = None, client: Any = None, sweep_on_start: bool = True
    ) -> None:
        self.cfg = cfg
        self.size = cfg.pool_size if size is None else size
        self.client = None
        if cfg.backend == "docker":
            from gapforge.sandbox.docker_backend import docker_client, require_image, sweep

            self.client = client or docker_client()
            require_image(self.client, cfg.image)
            if sweep_on_start:
                sweep(self.client)
        self.mount = Mount()
        self._cond = threading.Condition()
        self._blank: list[Channel] = []
        self._idle: dict[str, list[Channel]] = {}
        self._leased: dict[int, tuple[Channel, str]] = {}
        self._closed = False
        self.fill_errors: list[str] = []
        self._filler: threading.Thread | None = None
        if self.size > 0:
            self._filler = threading.Thread(target=self._fill, name="gapforge-sandbox-pool", daemon=True)
            self._filler.start()
        atexit.register(self.close)

    # -- starting ------------------------------------------------------------
    def _start(self) -> Channel:
        if self.cfg.backend == "docker":
            from gapforge.sandbox.docker_backend import start_container

            return start_container(self.client, self.cfg, str(self.mount.path))
        from gapforge.sandbox.process_backend import start_process

        return start_process(self.cfg, str(self.mount.path))

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._blank) >= self.size:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                channel = self._start()
            except (SandboxError, EnvCodeError, OSError) as e:
                self.fill_errors.append(str(e))
                with self._cond:
                    self._cond.wait(timeout=1.0)  # back off, then retry
                continue
            with self._cond:
                if self._closed:
                    channel.kill()
                    return
                self._blank.append(channel)
                self._cond.notify_all()

    def wait_warm(self, timeout: float = 60.0) -> bool:
        """Block until `size` blank sandboxes are ready (bench/tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._blank) >= self.size or self._closed, timeout=timeout)

    # -- leasing -------------------------------------------------------------
    def acquire(self, module_path: str | Path) -> tuple[Channel, dict[str, Any]]:
        """A sandbox with `module_path` loaded, and the module's description.

        Raises EnvCodeError(kind="load_error") when the module does not load.
        """
        rel = self.mount.add_module(module_path)
        with self._cond:
            if self._closed:
                raise SandboxError("the sandbox pool is closed: create a new one")
            idle = self._idle.get(rel)
            channel = idle.pop() if idle else (self._blank.pop() if self._blank else None)
            self._cond.notify_all()
        if channel is None:
            channel = self._start()
        try:
            info = channel.call("load", {"path": rel})
        except EnvCodeError as e:
            channel.kill()
            raise e.naming(module_path) from None
        with self._cond:
            self._leased[id(channel)] = (channel, rel)
        return channel, info

    def release(self, channel: Channel) -> None:
        """Return a healthy sandbox for reuse with the same module; destroy it otherwise."""
        with self._cond:
            _, rel = self._leased.pop(id(channel), (None, ""))
            keep = (
                rel
                and not self._closed
                and channel.broken is None
                and not channel.had_failure
                and len(self._idle.get(rel, [])) < max(self.size, 1)
            )
            if keep:
                self._idle.setdefault(rel, []).append(channel)
                return
        channel.kill()

    def discard(self, channel: Channel) -> None:
        with self._cond:
            self._leased.pop(id(channel), None)
        channel.kill()

    def counts(self) -> dict[str, int]:
        with self._cond:
            return {"blank": len(self._blank), "idle": sum(map(len, self._idle.values())), "leased": len(self._leased)}

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            channels = (
                self._blank + [c for cs in self._idle.values() for c in cs] + [c for c, _ in self._leased.values()]
            )
            self._blank, self._idle, self._leased = [], {}, {}
            self._cond.notify_all()
        if self._filler is not None:
            self._filler.join(timeout=self.cfg.start_timeout_s)
        for channel in channels:
            channel.kill()
        self.mount.close()
        atexit.unregister(self.close)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
