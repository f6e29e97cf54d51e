"""The host directory mounted read-only into every sandbox: the server, the SDK
and the env modules to load (named by content hash).

Layout (mounted at /opt/gapforge in containers):
    server.py   envs/__init__.py   envs/sdk.py   modules/<sha256-16>.py

Mounting instead of baking server+SDK into the image means code changes never
need an image rebuild. Every file is world-readable so the non-root sandbox
user can read it; nothing in it is writable from inside.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from gapforge.sandbox.errors import SandboxError

SANDBOX_DIR = Path(__file__).resolve().parent
ENVS_DIR = SANDBOX_DIR.parent / "envs"
CONTAINER_ROOT = "/opt/gapforge"


def runtime_files() -> dict[str, Path]:
    """Relative path in the mount -> source file on the host (the SDK only if it exists)."""
    files = {"server.py": SANDBOX_DIR / "server.py"}
    sdk = ENVS_DIR / "sdk.py"
    if sdk.is_file():
        files["envs/sdk.py"] = sdk
    return files


class Mount:
    """The temporary directory mounted into every sandbox; `close()` removes it."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="gapforge-mount-"))
        self.path.chmod(0o755)
        (self.path / "envs").mkdir(mode=0o755)
        (self.path / "modules").mkdir(mode=0o755)
        self._write("envs/__init__.py", b"")
        for rel, src in runtime_files().items():
            self._write(rel, src.read_bytes())

    def _write(self, rel: str, data: bytes) -> Path:
        dest = self.path / rel
        # one temporary file per writer: envs opened at once add the same module
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.chmod(0o644)
        tmp.replace(dest)
        return dest

    def add_module(self, module_path: str | Path) -> str:
        """Copy an env module in; returns its path relative to the mount's root."""
        src = Path(module_path)
        if not src.is_file():
            raise SandboxError(f"env module '{src}' not found: pass the path of a .py file")
        data = src.read_bytes()
        rel = f"modules/{hashlib.sha256(data).hexdigest()[:16]}.py"
        if not (self.path / rel).exists():
            self._write(rel, data)
        return rel

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
