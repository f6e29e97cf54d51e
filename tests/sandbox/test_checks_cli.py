"""`gapforge env validate`: bad input exits 2 with one line (no Docker needed); through the
real sandbox, the example envs pass (exit 0, JSON written) and each broken module fails
exactly its declared checks (exit 1), leaving no gapforge container behind."""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gapforge.cli import app
from gapforge.config import SandboxConfig
from gapforge.sandbox.docker_backend import list_containers

BROKEN = Path(__file__).parent / "broken"
EXAMPLES = sorted(p for p in (Path(__file__).parents[2] / "envs" / "examples").glob("*.py") if p.name != "__init__.py")
runner = CliRunner()


@pytest.fixture
def none_of_ours_left(docker_client):
    """After the test, no gapforge container started by THIS process remains (other helpers'
    tests may run containers concurrently, so filter on the pid label the sandbox sets)."""
    yield
    label = f"gapforge.pid={os.getpid()}"
    deadline = time.monotonic() + 10
    while (left := [c["Id"][:12] for c in list_containers(docker_client, label)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"gapforge containers left behind: {left}"


def _declared(path: Path) -> tuple[set[str], str]:
    values = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("EXPECTED_FAILURES", "VALIDATE_TARGET"):
                values[name] = set() if ast.unparse(node.value) == "set()" else ast.literal_eval(node.value)
    return set(values["EXPECTED_FAILURES"]), values["VALIDATE_TARGET"]


def _invoke(*args: str, cfg: SandboxConfig | None = None, workspace: Path | None = None):
    sets: list[str] = []
    if workspace is not None:
        sets += ["--set", f"workspace={workspace}"]
    if cfg is not None:
        for key in ("image", "memory_mb", "call_timeout_s", "start_timeout_s", "max_output_bytes", "pids_limit"):
            sets += ["--set", f"sandbox.{key}={getattr(cfg, key)}"]
    return runner.invoke(app, ["env", "validate", *args, *sets])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere/env.py"], "env module 'nowhere/env.py' not found: give the path of a .py file"),
        ([str(BROKEN)], f"env module '{BROKEN}' is a directory: give the path of a .py file"),
        ([str(BROKEN.parent.parent / "README.md")], "is not a .py file: give the path of a .py file"),
        ([str(BROKEN / "baseline_ok.py"), "--target", "moon"], "unknown env 'moon'"),
        ([str(BROKEN / "baseline_ok.py"), "--seeds", "1"], "--seeds 1: need at least 2 seeds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, workspace: Path) -> None:
    result = _invoke(*args, workspace=workspace)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 2


@pytest.mark.docker
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_pass_in_docker(
    path: Path, sandbox_config: SandboxConfig, workspace: Path, tmp_path: Path, none_of_ours_left: None
) -> None:
    out = tmp_path / "report.json"
    result = _invoke(str(path), "--target", "shop", "--json", str(out), cfg=sandbox_config, workspace=workspace)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["passed"] is True and report["seeds"] == 20 and report["target"] == "shop"
    assert {c["name"]: c["verdict"] for c in report["checks"]}["solvable"] == "PASS"
    assert f"JSON report: {out}" in result.output.replace("\n", "")


@pytest.mark.docker
def test_broken_modules_fail_their_checks_in_docker(
    sandbox_config: SandboxConfig, workspace: Path, tmp_path: Path, none_of_ours_left: None
) -> None:
    for path in sorted(BROKEN.glob("*.py")):
        expected, target = _declared(path)
        out = tmp_path / f"{path.stem}.json"
        result = _invoke(str(path), "--target", target, "--json", str(out), cfg=sandbox_config, workspace=workspace)
        assert result.exit_code == (1 if expected else 0), f"{path.name}: {result.output}"
        report = json.loads(out.read_text())
        failed = {c["name"] for c in report["checks"] if c["required"] and c["verdict"] != "PASS"}
        assert failed == expected, f"{path.name}: {result.output}"
        for check in report["checks"]:
            if check["name"] in expected:
                assert check["evidence"], f"{path.name}: {check['name']} has no evidence"
        kinds = {"hangs_in_tool.py": "timeout", "floods_output.py": "output_flood"}
        if path.name in kinds:
            not_trivial = next(c for c in report["checks"] if c["name"] == "not_trivial")
            assert not_trivial["evidence"]["kind"] == kinds[path.name], not_trivial
            assert not_trivial["evidence"]["phase"] == "step" and not_trivial["evidence"]["action"].startswith(
                "list_orders("
            )
        if path.name == "raises_in_reset.py":
            solvable = next(c for c in report["checks"] if c["name"] == "solvable")
            assert (
                solvable["evidence"]["kind"] == "exception"
                and "scenario table missing" in solvable["evidence"]["error"]
            )
