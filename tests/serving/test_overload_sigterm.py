"""`gapforge serve RUN` drains on SIGTERM: a request in flight when the signal comes finishes (200), a new one is
answered 503 while the server drains, and the process exits 0 with the drain reported. The real command in a
subprocess, with the tiny model; the request is long (greedy, a few hundred tokens) so it is in flight when the
signal lands, and the test waits on what the server prints and reports, not on time."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from gapforge.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _lines(proc: subprocess.Popen) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            out.put(line)
        out.put("")

    threading.Thread(target=pump, daemon=True).start()
    return out


def _until(lines: queue.Queue[str], pattern: str, proc: subprocess.Popen) -> re.Match[str]:
    seen = []
    while True:
        line = lines.get(timeout=240)
        seen.append(line)
        assert line, f"gapforge serve ended (exit {proc.poll()}) before printing {pattern!r}: {''.join(seen)[-1500:]}"
        if m := re.search(pattern, line):
            return m


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(workspace: Path, tiny_model_dir: Path) -> None:
    with Store(f"sqlite:///{workspace / 'gapforge.db'}") as store:
        run = store.create_run("trace", {})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "gapforge.cli",
        "serve",
        run,
        "--port",
        "0",
        "--base",
        str(tiny_model_dir),
        "--set",
        f"workspace={workspace}",
        "--set",
        "policy.max_new_tokens=400",
        "--set",
        "serving.drain_timeout_s=120",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        lines = _lines(proc)
        root = _until(lines, r"on (http://127\.0\.0\.1:\d+)/v1", proc).group(1)
        body = {
            "model": tiny_model_dir.name,
            "messages": [{"role": "user", "content": "Cancel order 1012 please"}],
            "temperature": 0,
            "max_tokens": 400,
        }
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(httpx.post, f"{root}/v1/chat/completions", json=body, timeout=240)
            while httpx.get(f"{root}/health").json()["in_flight"] < 1:  # the request reached the server (no fixed wait)
                assert not in_flight.done(), in_flight.result().text
            proc.send_signal(signal.SIGTERM)
            assert _until(lines, r"SIGTERM: draining (\d+) request", proc).group(1) == "1"
            late = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30)
            health = httpx.get(f"{root}/health")
            answered = in_flight.result()
        assert late.status_code == 503 and late.json()["error"]["code"] == "server_shutting_down"
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["role"] == "assistant"
        assert proc.wait(timeout=60) == 0, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
        assert "stopped: 1 request(s) were in flight, every one finished" in _until(lines, r"stopped:", proc).string
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
