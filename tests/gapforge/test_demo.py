"""`gapforge demo`, the README's main job, end to end (needs Docker: CI starts it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandbox.docker_backend import list_containers
from store import Store


def test_demo_runs_end_to_end(tmp_path: Path, docker_client) -> None:
    env = {**os.environ, "GAPFORGE_WORKSPACE": str(tmp_path / "ws"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "gapforge.cli", "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    leftovers = list_containers(docker_client, f"gapforge.pid={proc.pid}")
    assert leftovers == [], f"the demo left {len(leftovers)} sandbox container(s) behind"
    lines = [ln for ln in out.splitlines() if ln.strip()]
    run_id = lines[0].split()[-1]
    assert lines[0] == f"run {run_id}" and lines[-1] == f"run {run_id}"
    reports = sorted((tmp_path / "ws" / "validations").glob("*.json"))
    assert [r.name.split("-")[0] for r in reports] == ["precondition_verification", "structured_data_reasoning"]
    assert all(json.loads(r.read_text())["passed"] for r in reports)
    with Store(f"sqlite:///{tmp_path / 'ws' / 'gapforge.db'}") as store:
        rows = store.episodes(run_id)
        assert store.get_run(run_id).status == "done"
    assert len(rows) == 8 and len({r.task_family for r in rows}) == 4
    assert all(r.termination in ("done", "max_turns", "malformed_output") for r in rows)
