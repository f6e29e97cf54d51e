"""One namespace: the repository's top-level folders install as gapforge.<folder> (pyproject.toml maps them), and the
editable install resolves them to this checkout's folders without taking a user's own packages of those names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_folder_installs_under_gapforge() -> None:
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    folders = {f"gapforge.{name}": name for name in top - {"gapforge"}}
    assert SETUPTOOLS["package-dir"] == {"gapforge": "gapforge", **folders}, (
        "a top-level package folder that pyproject.toml does not map as gapforge.<folder> (or one it maps that is gone)"
    )


def test_every_folder_is_a_listed_package() -> None:
    """A folder missing from `packages` is silently left out of the wheel: its modules fail to import once installed.
    Every folder whose name is an identifier is one (as setuptools' namespace discovery counted them: data folders too)."""
    expected = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        for here, dirs, _files in os.walk(ROOT / folder):
            dirs[:] = [d for d in dirs if d.isidentifier() and d != "__pycache__"]
            expected.add(".".join([package, *Path(here).relative_to(ROOT / folder).parts]))
    listed = set(SETUPTOOLS["packages"])
    assert expected - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - expected == set(), "listed in pyproject.toml but no such folder"


def test_the_editable_install_resolves_the_folders_of_this_checkout() -> None:
    import gapforge.agents
    import gapforge.envs.sdk

    assert Path(gapforge.agents.__file__) == ROOT / "agents" / "__init__.py"
    assert Path(gapforge.envs.sdk.__file__) == ROOT / "envs" / "sdk.py"
    with pytest.raises(ModuleNotFoundError):
        __import__("gapforge.tests")  # only the folders that install, not every directory of the checkout


def test_a_users_own_package_named_like_a_folder_stays_theirs(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("MINE = True\n")
    code = "import agents, gapforge.agents; print(agents.MINE, gapforge.agents.__file__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", str(ROOT / "agents" / "__init__.py")]


def test_the_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    """Built from a copy of this checkout's sources (setuptools builds in the source tree): nothing but gapforge/ (and
    its metadata) at the top of site-packages."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in SETUPTOOLS["package-dir"].values():
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
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("gapforge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"gapforge", wheel.name.split("-py")[0] + ".dist-info"}
    for path in (
        "gapforge/agents/__init__.py",
        "gapforge/envs/sdk.py",
        "gapforge/sandbox/Dockerfile",
        "gapforge/ui/templates/base.html",
        "gapforge/ui/static/htmx.min.js",
        "gapforge/prompts/sdk_reference.md",
        "gapforge/demo_data/recordings/shop.yaml",
    ):
        assert path in names
