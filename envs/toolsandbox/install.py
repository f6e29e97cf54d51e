"""Create ToolSandbox's own venv (idempotent): `python -m gapforge.envs.toolsandbox.install --source PATH [--venv PATH]`.

Installs the pinned core dependencies (requirements.txt, from PyPI) and then the
ToolSandbox source itself with `--no-deps` (its full dependency list drags in model
SDKs it does not need here). The source is a clone of github.com/apple/ToolSandbox
or a pip URL (`--source git+https://github.com/apple/ToolSandbox`); `make toolsandbox-env`
passes the Makefile's TOOLSANDBOX_SRC (the one default; override it on the make line).
A stamp file records what was installed; a second run with the same inputs does nothing.

Standard library only (runs before anything else is installed). Exit 0 when the
source is absent and --if-present is given (ToolSandbox's tests then skip), 2 when it
is absent otherwise, 1 when pip fails.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REQUIREMENTS = HERE / "requirements.txt"
HOW_TO_POINT = (
    "pass --source PATH (a clone of github.com/apple/ToolSandbox) or a pip URL, "
    "or run `make toolsandbox-env TOOLSANDBOX_SRC=PATH`"
)
DEFAULT_VENV = REPO / ".toolsandbox-venv"


def stamp_text(source: str) -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return f"requirements {digest}\nsource {source}\n"


def install(source: str, venv: Path, python: str) -> bool:
    """True when something was installed, False when the stamp says it is up to date."""
    stamp = venv / ".installed"
    want = stamp_text(source)
    if stamp.exists() and stamp.read_text() == want:
        return False
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        if "://" not in source and not source.startswith("git+"):
            # pip builds local projects in place; build from a copy so the source stays untouched (it may be read-only)
            copy = Path(tmp) / "ToolSandbox"
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", ".git", "tests"))
            source_arg = str(copy)
        else:
            source_arg = source
        subprocess.run([*pip, "--no-deps", "--force-reinstall", source_arg], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tool_sandbox.scenarios"], check=True, capture_output=True
    )
    stamp.write_text(want)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--source", help="ToolSandbox source: a directory (a clone of github.com/apple/ToolSandbox) or a pip URL"
    )
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--python", default=sys.executable, help="interpreter for the venv (3.9-3.12)")
    ap.add_argument("--if-present", action="store_true", help="do nothing (exit 0) when the source directory is absent")
    args = ap.parse_args(argv)
    local = bool(args.source) and "://" not in args.source and not args.source.startswith("git+")
    if not args.source or (local and not Path(args.source).is_dir()):
        if args.if_present:
            absent = f"{args.source} absent" if args.source else "no source given"
            print(f"toolsandbox: {absent}; ToolSandbox tests will skip ({HOW_TO_POINT})")
            return 0
        missing = f"source {args.source} not found" if args.source else "no source given"
        print(f"toolsandbox: {missing}; {HOW_TO_POINT}", file=sys.stderr)
        return 2
    source = str(Path(args.source).resolve()) if local else args.source
    try:
        changed = install(source, args.venv, args.python)
    except subprocess.CalledProcessError as exc:
        print(
            f"toolsandbox: install failed ({' '.join(map(str, exc.cmd))[:200]}): exit {exc.returncode}", file=sys.stderr
        )
        return 1
    print(f"toolsandbox: {'installed' if changed else 'up to date'} in {args.venv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
