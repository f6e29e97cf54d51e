"""Per-episode cost of a fresh server state for an MCP target (examples/helpdesk), both reset ways.

    .venv/bin/python -m bench.mcp_reset [--tool-resets 200] [--restarts 10]

- `reset.tool`: `env.reset(task)` on an env whose server was just written to (a
  verify + unlock), i.e. the reset tool's round trip plus the episode's setup.
- `reset.mode: restart`: the same, where the reset ends the used server and starts a
  new one (process start, the SDK's import, the MCP handshake, the tool listing).
- Under the collector (a new env per episode): building an env that starts its own
  server, vs one that takes a parked server (reset.tool targets park theirs on close).

Prints ms per reset / per env and the ratio restart / tool.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from gapforge.envs.mcp import McpTargetEnv, pool
from gapforge.envs.protocol import Message, ToolCall

ROOT = Path(__file__).resolve().parents[1]

HELPDESK = ROOT / "examples" / "helpdesk"
WRITE = Message.assistant(
    tool_calls=[
        ToolCall(id="v", name="verify_identity", arguments={"employee_id": "E-1002", "badge_last4": "7310"}),
        ToolCall(id="u", name="unlock_account", arguments={"employee_id": "E-1002"}),
    ]
)


def restart_target(tmp: Path) -> str:
    doc = yaml.safe_load((HELPDESK / "target.yaml").read_text())
    doc["server"]["command"] = ["python", str(HELPDESK / "server.py")]
    doc["server"]["cwd"] = str(HELPDESK)
    doc["reset"] = {"mode": "restart"}
    doc["policy_file"] = str(HELPDESK / "policy.md")
    path = tmp / "restart.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def per_reset_ms(path: str, n: int) -> list[float]:
    env = McpTargetEnv(path)
    try:
        env.reset("ul-001")
        out = []
        for _ in range(n):
            env.step(WRITE)  # the server has been used: its state must be put back
            t = time.perf_counter()
            env.reset("ul-001")
            out.append((time.perf_counter() - t) * 1000)
        return out
    finally:
        env.close()


def per_env_ms(path: str, n: int, *, parked: bool) -> list[float]:
    out = []
    for _ in range(n):
        if not parked:
            pool.close_idle()
        t = time.perf_counter()
        env = McpTargetEnv(path)
        env.reset("ul-001")
        out.append((time.perf_counter() - t) * 1000)
        env.step(WRITE)
        env.close()
    return out


def show(label: str, ms: list[float]) -> float:
    med = statistics.median(ms)
    print(f"{label:<58} median {med:8.2f} ms  (min {min(ms):.2f}, max {max(ms):.2f}, n={len(ms)})")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool-resets", type=int, default=200)
    ap.add_argument("--restarts", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        restart = restart_target(Path(tmp))
        tool_path = str(HELPDESK / "target.yaml")
        tool = show("reset.tool (reset_state), per reset", per_reset_ms(tool_path, args.tool_resets))
        rest = show("reset.mode: restart, per reset", per_reset_ms(restart, args.restarts))
        print(f"ratio restart / tool: {rest / tool:.0f}x")
        cold = show(
            "collector pattern, env with a new server (+ reset)", per_env_ms(tool_path, args.restarts, parked=False)
        )
        warm = show(
            "collector pattern, env taking a parked server (+ reset)",
            per_env_ms(tool_path, args.tool_resets, parked=True),
        )
        print(f"ratio new server / parked server: {cold / warm:.0f}x")
    pool.close_idle()


if __name__ == "__main__":
    main()
