"""gapforge: capability-targeted agentic training (TRACE) as a product.

One namespace: the repository's top-level folders (`agents/`, `envs/`, `graph/`, ...) are the packages
`gapforge.agents`, `gapforge.envs`, `gapforge.graph`, ... An installed wheel holds them under `gapforge/`
(pyproject.toml maps each folder). Run from a source checkout without an install (pytest from the
repository root, worker processes started with PYTHONPATH=<repo>, the bench scripts), `_SourceFolders`
answers for exactly those names with the folders beside this package. It is installed only when this
package sits in gapforge's own checkout (its pyproject.toml beside the package), never from
site-packages, and it names no other module: installed, a user's own `agents` or `envs` package stays
theirs (in a checkout whose root comes first on sys.path, the checkout's top-level folders shadow them).
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path

# the repository's top-level folders that install under gapforge. (pyproject.toml [tool.setuptools] package-dir;
# tests/gapforge/test_packaging.py keeps the two equal)
FOLDERS = (
    "agents",
    "demo_policy",
    "envs",
    "evaluation",
    "executor",
    "graph",
    "prompts",
    "sandbox",
    "serving",
    "store",
    "training",
    "ui",
)


def source_root() -> Path | None:
    """The checkout this package was imported from, or None when it is installed (a wheel, not `pip install -e`)."""
    root = Path(__file__).resolve().parent.parent
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "gapforge"' in project else None


class _SourceFolders:
    """Meta-path finder: `gapforge.<folder>` -> `<checkout>/<folder>` for the names in FOLDERS, nothing else."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in FOLDERS:
            return None
        init = self.root / name / "__init__.py"
        if not init.is_file():
            return None
        return spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])

    def invalidate_caches(self) -> None:
        pass


def _install_source_finder() -> None:
    root = source_root()
    if root is None or any(isinstance(f, _SourceFolders) for f in sys.meta_path):
        return
    # first: before an editable install's finder, which may map the same names to another checkout
    sys.meta_path.insert(0, _SourceFolders(root))


_install_source_finder()
