"""Build DEST/gapforge/ as the wheel lays it out, from symlinks into this checkout: gapforge/'s own files plus one
link per folder that pyproject.toml [tool.setuptools.package-dir] maps under gapforge. (agents/, envs/, ...).

Tools that find a package's modules by walking its directory (import-linter, grimp) see in a checkout only
gapforge/'s own modules, editable install or not (it maps the folders by an import hook, not in the directory); with
DEST first on the path they see the installed layout.

    python .ci/installed_view.py DEST
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(dest: Path, root: Path = ROOT) -> Path:
    """DEST/gapforge (DEST must be empty or absent); returns DEST."""
    package = dest / "gapforge"
    package.mkdir(parents=True)
    for entry in (root / "gapforge").iterdir():
        (package / entry.name).symlink_to(entry)
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    for name, folder in mapping.items():
        head, _, sub = name.partition(".")
        if head == "gapforge" and sub and "." not in sub:
            (package / sub).symlink_to(root / folder)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python .ci/installed_view.py DEST")
    build(Path(sys.argv[1]))
