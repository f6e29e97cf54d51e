"""The executor section: local by default, addresses checked, an unreachable Ray head stops a command
before any work with one line naming executor.address (exit 2)."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gapforge.config import ConfigError, load_config
from gapforge.executor import ExecutorConfig, ExecutorUnavailable, episode_player, job_runner, sandbox_checks
from gapforge.executor.cluster import probe
from gapforge.training.run import run_jobs

ROOT = Path(__file__).resolve().parents[2]


def test_local_is_the_default_and_changes_nothing() -> None:
    cfg = load_config(None, [], environ={})
    assert cfg.executor.kind == "local"
    assert job_runner(cfg.executor) is run_jobs and sandbox_checks(cfg.executor, cfg.sandbox) is None


async def test_the_local_player_is_none_so_the_collector_plays_in_process() -> None:
    async with episode_player(ExecutorConfig(), lambda: None, lambda: None, 4) as player:
        assert player is None


@pytest.mark.parametrize("address", ["ray:/host:1", "http://h:1", "host", "a b:1"])
def test_a_malformed_address_is_a_one_line_config_error(address: str) -> None:
    with pytest.raises(ConfigError, match="executor.address"):
        load_config(None, ["executor.kind=ray", f"executor.address={address}"], environ={})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket goes


def test_probe_names_the_address_of_a_head_that_does_not_answer() -> None:
    port = _closed_port()
    with pytest.raises(ExecutorUnavailable, match=rf"executor.address '127.0.0.1:{port}': no Ray head answers"):
        probe(f"127.0.0.1:{port}")
    with pytest.raises(ExecutorUnavailable, match="ray://127.0.0.1"):
        probe(f"ray://127.0.0.1:{port}")


@pytest.mark.parametrize("command", [["run"], ["rollouts", "collect", "--env", "shop", "--policy", "scripted"]])
def test_an_unreachable_head_stops_the_command_with_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("extra 'ray' not installed (pip install -e .[ray]); CI installs it")
    port = _closed_port()
    args = [
        *command,
        "--set",
        f"workspace={tmp_path / 'ws'}",
        "--set",
        "executor.kind=ray",
        "--set",
        f"executor.address=127.0.0.1:{port}",
    ]
    # a loaded machine imports slowly
    proc = subprocess.run(
        [sys.executable, "-m", "gapforge.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and f"executor.address '127.0.0.1:{port}'" in lines[0] and "ray start --head" in lines[0], (
        lines
    )
    assert not (tmp_path / "ws" / "gapforge.db").exists() or "run " not in proc.stdout  # no run was started
