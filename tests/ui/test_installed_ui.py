"""`gapforge ui` as a user starts it: the installed command, from a directory that is not the checkout. The wheel test
installs a wheel of this project into a fresh venv that sees the project venv's dependencies but not its editable
gapforge, and serves a run's pages from a temporary directory; the fast test loads every template from a process
whose working directory holds no `ui` folder (the checkout root on sys.path made a top-level `ui` importable and hid
a loader that asked for it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import wait_until_listening

pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
    "package-dir"
].values()


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would put the checkout on sys.path or pick another workspace."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GAPFORGE_")}
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_template_loads_from_outside_the_checkout(tmp_path: Path) -> None:
    code = (
        "from gapforge.ui.render import templates; env = templates(); "
        "print(len([env.get_template(n) for n in env.list_templates()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == len(list((ROOT / "ui" / "templates").glob("*.html")))


def _build_wheel(tmp_path: Path) -> Path:
    """A wheel of this checkout, built from a copy of its sources (setuptools writes build/ and egg-info beside them)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(PIP_NO_INDEX="1"),
    )
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("gapforge-*.whl")
    return wheel


def _venv_with_wheel(tmp_path: Path, wheel: Path) -> Path:
    """A venv holding the wheel's gapforge; the project venv's site-packages is on its path through a .pth line, so the
    dependencies import but the editable install's finder (itself started by a .pth file there) never runs."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (Path(purelib) / "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 (a loopback URL of the server this test started)
        return r.status, r.read().decode()


def test_the_installed_command_serves_a_run_from_any_directory(tmp_path: Path) -> None:
    from gapforge.store import Store

    venv = _venv_with_wheel(tmp_path, _build_wheel(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import gapforge, gapforge.ui.app as a; print(gapforge.__file__); print(a.__file__)",
        ],
        cwd=elsewhere,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    site = venv.resolve() / "lib"
    assert all(Path(p).resolve().is_relative_to(site) for p in where.stdout.split()), (
        f"not the wheel's copy: {where.stdout}"
    )

    ws = tmp_path / "ws"
    ws.mkdir()
    with Store(f"sqlite:///{ws / 'gapforge.db'}") as store:
        run_id = store.create_run("trace", {"config": {"rollouts": {"env": "shop"}}}, run_id="wheel-ui-run")
    port = _free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "gapforge"), "ui", "--port", str(port), "--set", f"workspace={ws}"],
        cwd=elsewhere,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_listening(proc, port, what="gapforge ui")
        status, page = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "<title>" in page and f'href="/runs/{run_id}"' in page
        status, page = _get(f"http://127.0.0.1:{port}/runs/{run_id}")
        assert status == 200 and run_id in page and "Internal error" not in page
        status, css = _get(f"http://127.0.0.1:{port}/static/ui.css")
        assert status == 200 and css.strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
