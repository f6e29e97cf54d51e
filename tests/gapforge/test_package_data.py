"""A non-editable install (`pip install .`, a wheel) carries every file the product reads besides its modules: each
data file inside an installed package is matched by pyproject.toml's package-data globs, and the demo's data
(`gapforge.demo_data`: the shipped policy, the recordings) lies inside an installed package. Mirrors setuptools:
a package is a name in `packages` whose directory `package-dir` gives; its package-data
patterns (its own and `"*"`) are globs relative to its directory."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from gapforge.demo_data import RECORDINGS_DIR, SHOP_POLICY_DIR

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"__pycache__"}


def _setuptools() -> tuple[list[str], dict[str, list[str]]]:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return tool["packages"], tool.get("package-data", {})


def package_dir(name: str) -> Path:
    """Where setuptools takes package `name` from: the longest `package-dir` entry that prefixes it, the rest of the
    dotted name as folders below it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"].get("package-dir", {})
    head = max((k for k in mapping if name == k or name.startswith(k + ".")), key=len, default="")
    rest = name[len(head) :].lstrip(".")
    return ROOT.joinpath(mapping.get(head, ""), *(rest.split(".") if rest else []))


def installed_packages() -> dict[str, Path]:
    """pyproject's package list (dotted names under `gapforge.`), each with its directory in the checkout."""
    names, _ = _setuptools()
    return {name: package_dir(name) for name in names}


def holders(path: Path, packages: dict[str, Path]) -> list[str]:
    """The installed packages whose directory holds `path` (a data folder listed as a package of its own, such as
    ui/templates, sits inside its parent's)."""
    return [name for name, pkg in packages.items() if path.is_relative_to(pkg)]


def packaged(path: Path, packages: dict[str, Path], data: dict[str, list[str]] | None = None) -> bool:
    """Whether a non-editable install carries `path`: a module of a listed package, or matched by the package-data
    globs of a package holding it (`data`: pyproject's, unless given)."""
    names = holders(path, packages)
    if path.suffix == ".py" and any(path.parent == packages[n] for n in names):
        return True
    data = _setuptools()[1] if data is None else data
    return any(
        path in set(packages[n].glob(pattern)) for n in names for pattern in [*data.get("*", []), *data.get(n, [])]
    )


def data_files(packages: dict[str, Path]) -> list[Path]:
    """Every file inside an installed package's directory tree that is not one of its packages' modules."""
    out = []
    for pkg in packages.values():
        for f in pkg.rglob("*"):
            if f.is_file() and not SKIP & set(f.relative_to(ROOT).parts) and f.suffix != ".pyc":
                if not (f.suffix == ".py" and (f.parent / "__init__.py").is_file()):
                    out.append(f)
    return sorted(set(out))


def test_the_demos_data_lies_inside_installed_packages_and_is_matched() -> None:
    packages = installed_packages()
    needed = [
        f for d in (SHOP_POLICY_DIR, RECORDINGS_DIR) for f in d.rglob("*") if f.is_file() and not SKIP & set(f.parts)
    ]
    assert {"model.safetensors", "teach.json", "tokenizer.json", "chat_template.jinja", "shop.yaml"} <= {
        f.name for f in needed
    }
    missing = [str(f.relative_to(ROOT)) for f in needed if not packaged(f, packages)]
    assert not missing, f"not in a non-editable install (add a package-data glob in pyproject.toml): {missing}"


def test_every_data_file_of_an_installed_package_is_matched_by_a_glob() -> None:
    packages = installed_packages()
    files = data_files(packages)
    assert any(f.name == "Dockerfile" for f in files) and any(f.suffix == ".md" and "prompts" in f.parts for f in files)
    missing = [str(f.relative_to(ROOT)) for f in files if not packaged(f, packages)]
    assert not missing, f"not in a non-editable install (add a package-data glob in pyproject.toml): {missing}"


def test_a_forgotten_glob_is_caught() -> None:
    packages, (_, data) = installed_packages(), _setuptools()
    weights, template = SHOP_POLICY_DIR / "model.safetensors", ROOT / "ui" / "templates" / "run.html"
    assert packaged(weights, packages, data) and packaged(template, packages, data)
    for path in (weights, template):
        forgotten = {k: v for k, v in data.items() if k == "*" or k not in holders(path, packages)}
        assert not packaged(path, packages, forgotten)


def test_demo_data_imports_nothing_of_ours() -> None:
    tree = ast.parse((ROOT / "gapforge" / "demo_data" / "__init__.py").read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in imported} <= {"__future__", "pathlib", "warnings"}
