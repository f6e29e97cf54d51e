"""The MCP target's failure boundaries: task-file errors, servers that do not start, die or hang; restart mode; URL servers."""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import wait_until_listening

pytest.importorskip("mcp", reason="the MCP target needs the mcp extra: pip install 'gapforge[mcp]'")

from gapforge.agents.episode import run_episode  # noqa: E402
from gapforge.envs.errors import EnvError  # noqa: E402
from gapforge.envs.mcp import McpTargetEnv, pool  # noqa: E402
from gapforge.envs.mcp import env as mcp_env  # noqa: E402
from gapforge.envs.mcp.errors import ServerFailure, ServerStartError, TaskFileError  # noqa: E402
from gapforge.envs.protocol import Message, ToolCall  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
SERVER = str(DATA / "mcp_counter_server.py")
HELPDESK = Path(__file__).resolve().parents[2] / "examples" / "helpdesk"
BASE: dict[str, Any] = yaml.safe_load((DATA / "mcp_counter.yaml").read_text())


@pytest.fixture(scope="module", autouse=True)
def _end_parked_servers():
    yield
    pool.close_idle()


def _target(tmp_path: Path, name: str = "t.yaml", **changes: Any) -> str:
    doc = copy.deepcopy(BASE)
    doc["server"]["command"] = ["python", SERVER]
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = doc
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _calls(*calls: tuple[str, dict[str, Any]]) -> Message:
    return Message.assistant(tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)])


def _one_line_error(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


# ---- the task file ------------------------------------------------------------
def test_a_check_on_a_tool_the_server_lacks_is_one_line(tmp_path: Path) -> None:
    path = _target(tmp_path, **{"tasks__0__success__state__0__tool": "get_countr"})
    with pytest.raises(TaskFileError) as err:
        McpTargetEnv(path)
    text = _one_line_error(err)
    assert "tasks[0] (twice).success.state[0].tool names 'get_countr'" in text and "get_counter" in text
    assert isinstance(err.value, EnvError)  # exit 2 from the CLI


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tasks__1__user": {"fact": {}}}, "unknown key 'tasks[1] (once).user.fact'"),
        ({"reset__mode": "restart"}, "give exactly one of reset.tool"),
        ({"policy": None}, "give exactly one of policy"),
        ({"tasks__1__id": "twice"}, "task id 'twice' appears twice"),
        ({"tasks__1__success": {}}, "tasks[1] (once).success: a task needs at least one success check"),
        (
            {"tasks__0__success__grader": "nope_module_xyz:grade"},
            "grader 'nope_module_xyz:grade' of task twice cannot be imported",
        ),
        ({"server__url": "http://127.0.0.1:1/mcp"}, "give exactly one of server.command"),
        ({"tasks__0__success__state__0__tool": "bump"}, "which the server declares as not read-only"),
    ],
    ids=[
        "unknown-key",
        "two-resets",
        "no-policy",
        "duplicate-id",
        "no-checks",
        "bad-grader",
        "two-servers",
        "write-in-check",
    ],
)
def test_task_file_errors_are_one_line(tmp_path: Path, changes: dict[str, Any], expected: str) -> None:
    path = _target(tmp_path, **changes)
    with pytest.raises(EnvError) as err:
        McpTargetEnv(path)
    assert expected in _one_line_error(err)


def test_missing_task_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="does not exist"):
        McpTargetEnv(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: [\n")
    with pytest.raises(TaskFileError) as err:
        McpTargetEnv(str(bad))
    assert "bad.yaml line" in _one_line_error(err) and "not valid YAML" in str(err.value)


def test_grader_from_a_file_beside_the_task_file(tmp_path: Path) -> None:
    (tmp_path / "grade.py").write_text("def grade(ctx):\n    return ctx.call_tool('get_counter', {})['n'] / 4\n")
    path = _target(tmp_path, **{"tasks__0__success": {"grader": "grade.py:grade"}})
    env = McpTargetEnv(path)
    try:
        env.reset("twice")
        env.step(_calls(("bump", {}), ("bump", {}), ("bump", {})))
        score = env.score()
        assert (score.reward, score.success, score.components) == (0.75, False, {"grader": 0.75})
    finally:
        env.close()


# ---- servers that do not start -----------------------------------------------------
def test_a_server_command_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    path = _target(tmp_path, **{"server__command": ["no-such-mcp-server-xyz", "--stdio"]})
    with pytest.raises(ServerStartError) as err:
        McpTargetEnv(path)
    text = _one_line_error(err)
    assert "the MCP server did not start" in text and "FileNotFoundError" in text and "server.command" in text


def test_a_server_that_exits_at_start_shows_its_stderr(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(
        "import sys\nprint('config error: TICKET_DB is not set', file=sys.stderr)\nsys.exit(3)\n"
    )
    path = _target(tmp_path, **{"server__command": ["python", "broken.py"]})
    with pytest.raises(ServerStartError) as err:
        McpTargetEnv(path)
    assert "its stderr ends: 'config error: TICKET_DB is not set'" in _one_line_error(err)


def test_a_server_that_never_answers_the_handshake_times_out(tmp_path: Path) -> None:
    (tmp_path / "mute.py").write_text(
        "import os, pathlib, time\npathlib.Path('mute.pid').write_text(str(os.getpid()))\ntime.sleep(60)\n"
    )
    path = _target(tmp_path, **{"server__command": ["python", "mute.py"], "server__startup_timeout_s": 0.5})
    with pytest.raises(ServerStartError) as err:
        McpTargetEnv(path)
    assert "did not answer the handshake within 0.5 s" in _one_line_error(err)
    pid = int((tmp_path / "mute.pid").read_text())
    assert not _alive(pid)  # the mute process was ended (stdin closed, then SIGTERM), not left running or waited for


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie awaiting its parent's wait counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---- servers that die mid-episode ---------------------------------------------------
class _CrashPolicy:
    name = "crasher"

    async def respond(
        self, messages: list[Message], tools: list[dict[str, Any]], *, temperature: float | None = None
    ) -> Message:
        return _calls(("bump", {}), ("crash", {"reason": "ticket store corrupt"}))

    async def aclose(self) -> None:
        return None


def test_a_server_dying_mid_episode_is_an_env_error_with_its_last_words(tmp_path: Path) -> None:
    path = _target(tmp_path)
    env = McpTargetEnv(path)
    try:
        ep = asyncio.run(run_episode(_CrashPolicy(), env, "twice", max_turns=3))
    finally:
        env.close()
    assert ep.termination == "env_error" and ep.turns == 1
    assert "ServerFailure" in (
        ep.error or ""
    ) and "its stderr ends: 'counter server up fatal: ticket store corrupt'" in (ep.error or "")
    assert pool.idle_count(env._key) == 0  # a dead server is never parked
    fresh = McpTargetEnv(path)  # the next instance starts a new server and plays
    try:
        fresh.reset("twice")
        fresh.step(_calls(("bump", {}), ("bump", {})))
        fresh.step(Message.assistant("done"))
        assert fresh.score().success
    finally:
        fresh.close()


def test_a_killed_server_fails_the_step_at_once(tmp_path: Path) -> None:
    env = McpTargetEnv(_target(tmp_path))
    try:
        env.reset("twice")
        pid = _counter(env)["pid"]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ServerFailure) as err:
            env.step(_calls(("bump", {})))
        # the closed pipe is seen as such (not waited out as a call timeout, whose message would say so)
        assert "closed the connection" in str(err.value) and "counter server up" in str(err.value)
        with pytest.raises(ServerFailure, match="connection is gone"):
            env.reset("twice")
    finally:
        env.close()


def _hanging_target(tmp_path: Path, **changes: Any) -> str:
    """A counter server with a tool `hang` that answers only after 30 s."""
    shutil.copy(SERVER, tmp_path)  # beside slow.py, whose folder starts the server's path
    (tmp_path / "slow.py").write_text(
        "import time\nimport mcp_counter_server as m\n"
        "@m.server.tool()\ndef hang() -> dict:\n    '''Never answers in time.'''\n    time.sleep(30)\n    return {}\n"
        "m.server.run('stdio')\n"
    )
    return _target(tmp_path, **{"server__command": ["python", "slow.py"], **changes})


def test_a_silent_server_hits_the_call_deadline(tmp_path: Path) -> None:
    path = _hanging_target(tmp_path, server__call_timeout_s=0.5)
    env = McpTargetEnv(path)
    try:
        env.reset("twice")
        with pytest.raises(ServerFailure, match="did not answer in time|no answer"):
            env.step(_calls(("hang", {})))
    finally:
        env.close()


def test_a_connection_closed_with_a_call_in_flight_is_ended_not_parked(tmp_path: Path) -> None:
    env = McpTargetEnv(_hanging_target(tmp_path))  # an episode abandoned at its time limit inside `hang`
    env.reset("twice")
    conn = env._conn
    failed: list[BaseException] = []

    def abandoned_step() -> None:
        try:
            env.step(_calls(("hang", {})))
        except BaseException as e:  # noqa: BLE001 - what the abandoned call ends with
            failed.append(e)

    stuck = threading.Thread(target=abandoned_step, daemon=True)
    stuck.start()
    end = time.monotonic() + 10
    while conn.calls < 2 and time.monotonic() < end:  # the reset tool's call, then `hang`
        time.sleep(0.01)
    assert conn.calls == 2
    env.close()
    assert pool.idle_count(env._key) == 0 and not conn.alive  # the next episode's reset cannot race the old call
    stuck.join(timeout=10)
    assert isinstance(failed[0], ServerFailure) and conn.in_flight == 0


# ---- restart mode -------------------------------------------------------------------
def test_restart_mode_starts_a_new_server_for_each_used_episode(tmp_path: Path) -> None:
    path = _target(tmp_path, **{"reset": {"mode": "restart"}})
    env = McpTargetEnv(path)
    try:
        assert "reset_state" in {t["function"]["name"] for t in env.tools()}  # no reset tool named: nothing hidden
        env.reset("twice")
        first = _counter(env)["pid"]
        env.step(_calls(("bump", {}), ("bump", {})))
        assert _counter(env)["n"] == 2
        env.reset("once")
        assert _counter(env) == {"n": 0, "pid": _counter(env)["pid"]} and _counter(env)["pid"] != first
    finally:
        env.close()
    assert pool.idle_count(env._key) == 0  # restart-mode servers are never parked


# ---- a streamable-HTTP server -----------------------------------------------------------
def test_url_server_with_reset_tool_one_episode_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "server.py", "--http", str(port)],
        cwd=HELPDESK,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_listening(proc, port, what="the help-desk server", timeout_s=30)
        doc = yaml.safe_load((HELPDESK / "target.yaml").read_text())
        doc["server"] = {"url": f"http://127.0.0.1:{port}/mcp"}
        doc["policy_file"] = str(HELPDESK / "policy.md")
        (tmp_path / "url.yaml").write_text(yaml.safe_dump(doc))
        a, b = McpTargetEnv(str(tmp_path / "url.yaml")), McpTargetEnv(str(tmp_path / "url.yaml"))
        try:
            a.reset("ul-001")
            a.step(
                _calls(
                    ("verify_identity", {"employee_id": "E-1002", "badge_last4": "7310"}),
                    ("unlock_account", {"employee_id": "E-1002"}),
                )
            )
            monkeypatch.setattr(mcp_env, "URL_WAIT_S", 0.2)
            with pytest.raises(ServerFailure, match="one episode at a time per URL server"):
                b.reset("ul-001")
            a.close()
            b.reset("ul-001")  # a's episode is over: b holds the server and finds it fresh
            assert b.score().info["failed_checks"][0].startswith("get_account(employee_id='E-1002'): locked is true")
        finally:
            a.close()
            b.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _counter(env: McpTargetEnv) -> dict[str, Any]:
    return env._conn.call("get_counter", {}).value()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
