"""An MCP server killed mid-episode during `collect`: that episode ends on the env's boundary (`env_error`) with
the server's last words, a fresh server serves the next episode, and the collection goes on."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("mcp", reason="the MCP target needs the mcp extra: pip install 'gapforge[mcp]'")

from gapforge.agents.rollouts import CollectPlan, collect  # noqa: E402
from gapforge.envs.mcp import McpTargetEnv, pool  # noqa: E402
from gapforge.envs.protocol import Message, ToolCall  # noqa: E402
from gapforge.store import Store  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
PID = re.compile(r'"pid":\s*(\d+)')


class _KillingPolicy:
    """Reads the server's pid first; in the first episode it then kills the server and asks for a bump; otherwise it
    bumps as often as the opening asks and says done."""

    name = "killer"

    def __init__(self) -> None:
        self.killed: list[int] = []
        self.pids: list[int] = []

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        results = [m.content or "" for m in messages if m.role == "tool"]
        if not results:
            return Message.assistant(tool_calls=[ToolCall(id="c0", name="get_counter", arguments={})])
        pid = int(PID.search(results[0]).group(1))
        if len(results) == 1:
            self.pids.append(pid)
            if not self.killed:
                os.kill(pid, signal.SIGKILL)  # killed from outside between two calls of the episode
                self.killed.append(pid)
        wanted = 2 if "twice" in (messages[1].content or "") else 1
        if len(results) - 1 < wanted:
            return Message.assistant(tool_calls=[ToolCall(id=f"c{len(results)}", name="bump", arguments={})])
        return Message.assistant(content="done")

    async def aclose(self) -> None:
        return None


def test_a_server_killed_mid_episode_costs_that_episode_and_a_fresh_server_serves_the_next(tmp_path: Path) -> None:
    doc = yaml.safe_load((DATA / "mcp_counter.yaml").read_text())
    doc["server"]["command"] = ["python", str(DATA / "mcp_counter_server.py")]
    target = tmp_path / "counter.yaml"
    target.write_text(yaml.safe_dump(doc))
    spec = f"mcp:{target}"
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    policy = _KillingPolicy()
    try:
        plan = CollectPlan(
            run_id=store.create_run("rollouts", {}),
            env=spec,
            tasks=["twice", "once"],
            samples=1,
            concurrency=1,
            max_turns=6,
            episode_timeout_s=60.0,
        )
        result = asyncio.run(collect(plan, make_env=lambda: McpTargetEnv(str(target)), policy=policy, sink=store))
        rows = {r.task_id: r for r in store.episodes(plan.run_id)}
    finally:
        store.close()
        pool.close_idle()
    assert (result.ran, result.env_errors, result.infra_failures, result.timeouts) == (2, 1, [], [])
    killed = rows["twice"]
    assert (
        killed.termination == "env_error"
        and "ServerFailure" in killed.error
        and "closed the connection" in killed.error
    )
    assert "counter server up" in killed.error  # the server's last words
    assert rows["once"].termination == "done" and rows["once"].success  # the next episode played on a fresh server
    assert policy.pids[1] != policy.killed[0]
