"""Benchmark: how long the sandbox takes to report a hostile module's failure, and how long
`gapforge env validate` takes per example env and per broken module, in Docker.

    .venv/bin/python -m bench.sandbox_faults [--skip-validate] [--skip-hostile]

Hostile modules (tests/sandbox/hostile/): seconds from opening the sandboxed env to the
EnvCodeError of its first call, container start included, with the limits the hostile tests use
(128 MB, call timeout 3 s, 1 s for the hangs); a healthy module's open + reset is the baseline in
the same run. Validation: wall seconds of the CLI (a process of its own, interpreter start
included) and the checks' own seconds from its JSON report; the target was ~10 s per example env.
The tests check each outcome (kind, verdict); this prints the times and does not pass or fail.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gapforge.envs.protocol import Message
from gapforge.sandbox.config import SandboxConfig
from gapforge.sandbox.env import SandboxedEnv
from gapforge.sandbox.errors import EnvCodeError

ROOT = Path(__file__).resolve().parents[1]

HOSTILE = ROOT / "tests" / "sandbox" / "hostile"
BROKEN = ROOT / "tests" / "sandbox" / "broken"
HEALTHY = ROOT / "tests" / "sandbox" / "envs" / "counter_env.py"
EXAMPLES = sorted(p for p in (ROOT / "envs" / "examples").glob("*.py") if p.name != "__init__.py")
# module -> (the kind its first call fails with, the call timeout the hostile tests give it)
FAILING = {
    "memory_hog": ("oom", 3.0),
    "spin": ("timeout", 1.0),
    "sleep": ("timeout", 1.0),
    "fd_flood": ("timeout", 1.0),
    "print_flood": ("output_flood", 3.0),
    "hard_exit": ("crash", 3.0),
    "channel_garbage": ("bad_output", 3.0),
}


def hostile_config(call_timeout_s: float) -> SandboxConfig:
    return SandboxConfig(
        backend="docker",
        memory_mb=128,
        cpus=1.0,
        pids_limit=32,
        call_timeout_s=call_timeout_s,
        start_timeout_s=20.0,
        pool_size=1,
        max_output_bytes=64_000,
    )


def time_to_failure(path: Path, cfg: SandboxConfig) -> tuple[float, str]:
    """Seconds from opening the env to its first call's outcome, and that outcome's kind ('ok' when none)."""
    t0 = time.perf_counter()
    kind = "ok"
    with SandboxedEnv(path, cfg) as env:
        try:
            env.reset(0)
            env.step(Message.assistant("hello"))
        except EnvCodeError as e:
            kind = e.kind
    return time.perf_counter() - t0, kind


def hostile() -> None:
    print("-- hostile modules: open + first call until the failure is reported (Docker, container start included)")
    seconds, _ = time_to_failure(HEALTHY, hostile_config(3.0))
    print(f"{'healthy counter_env (baseline)':<34} {seconds:6.2f} s")
    for module, (expected, call_timeout_s) in FAILING.items():
        seconds, kind = time_to_failure(HOSTILE / f"{module}.py", hostile_config(call_timeout_s))
        note = "" if kind == expected else f"   (expected {expected})"
        print(f"{module:<34} {seconds:6.2f} s  {kind:<13} call timeout {call_timeout_s:.0f} s{note}")


def validate(path: Path, target: str, workspace: Path) -> tuple[float, float, int]:
    """Wall seconds of `gapforge env validate`, the checks' seconds from its report, its exit code."""
    out = workspace / f"{path.stem}.json"
    cmd = [
        sys.executable,
        "-m",
        "gapforge.cli",
        "env",
        "validate",
        str(path),
        "--target",
        target,
        "--json",
        str(out),
        "--set",
        f"workspace={workspace}",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    checks = json.loads(out.read_text())["seconds"] if out.exists() else float("nan")
    return wall, checks, done.returncode


def validation() -> None:
    print("-- gapforge env validate (Docker, default limits): wall (with interpreter start) / the checks' own seconds")
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        workspace = Path(tmp)
        for path in EXAMPLES:
            wall, checks, code = validate(path, "shop", workspace)
            print(f"example {path.stem:<30} {wall:6.2f} s / {checks:6.2f} s  exit {code}")
        for path in sorted(BROKEN.glob("*.py")):
            target = next(
                (
                    line.split("=", 1)[1].strip().strip("\"'")
                    for line in path.read_text().splitlines()
                    if line.startswith("VALIDATE_TARGET")
                ),
                "shop",
            )
            wall, checks, code = validate(path, target, workspace)
            print(f"broken  {path.stem:<30} {wall:6.2f} s / {checks:6.2f} s  exit {code}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-hostile", action="store_true")
    ap.add_argument("--skip-validate", action="store_true")
    args = ap.parse_args()
    if not args.skip_hostile:
        hostile()
    if not args.skip_validate:
        validation()


if __name__ == "__main__":
    main()
