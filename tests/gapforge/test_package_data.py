"""A non-editable install (`pip install .`, a wheel) carries every file the product reads besides its modules: each
data file inside an installed package is matched by pyproject.toml's package-data globs, and the demo's data
(`gapforge.demo_data`: the shipped policy, the recordings) lies inside an installed package. Mirrors setuptools:
a package is a directory with `__init__.py` whose dotted name matches `packages.find.include`; its package-data
patterns (its own and `"*"`) are globs relative to its directory."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

from gapforge.demo_data import RECORDINGS_DIR, SHOP_POLICY_DIR

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"__pycache__"}


def _setuptools() -> tuple[list[str], dict[str, list[str]]]:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return tool["packages"]["find"]["include"], tool.get("package-data", {})


def installed_packages() -> dict[str, Path]:
    include, _ = _setuptools()
    found = {}
    for init in ROOT.rglob("__init__.py"):
        pkg = init.parent
        rel = pkg.relative_to(ROOT)
        if SKIP & set(rel.parts) or rel.parts[0].startswith("."):
            continue
        name = ".".join(rel.parts)
        # setuptools finds a package only below another found one (or at the top)
        if any(fnmatch.fnmatchcase(name, pat) for pat in include) and all((ROOT.joinpath(*rel.parts[:i]) / "__init__.py").is_file()
                                                                         for i in range(1, len(rel.parts))):
            found[name] = pkg
    return found


def owner(path: Path, packages: dict[str, Path]) -> str | None:
    """The installed package whose directory holds `path` most closely."""
    best = None
    for name, pkg in packages.items():
        if path.is_relative_to(pkg) and (best is None or len(pkg.parts) > len(packages[best].parts)):
            best = name
    return best


def packaged(path: Path, packages: dict[str, Path], data: dict[str, list[str]] | None = None) -> bool:
    """Whether a non-editable install carries `path`: a module of a package, or matched by its package-data globs
    (`data`: pyproject's, unless given)."""
    name = owner(path, packages)
    if name is None:
        return False
    pkg = packages[name]
    if path.suffix == ".py" and path.parent == pkg:
        return True
    data = _setuptools()[1] if data is None else data
    return any(path in set(pkg.glob(pattern)) for pattern in [*data.get("*", []), *data.get(name, [])])


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
    needed = [f for d in (SHOP_POLICY_DIR, RECORDINGS_DIR) for f in d.rglob("*") if f.is_file() and not SKIP & set(f.parts)]
    assert {"model.safetensors", "teach.json", "tokenizer.json", "chat_template.jinja", "shop.yaml"} <= {f.name for f in needed}
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
    weights, recorded = SHOP_POLICY_DIR / "model.safetensors", RECORDINGS_DIR / "shop" / "precondition_verification_3.py"
    assert packaged(weights, packages, data) and packaged(recorded, packages, data)
    for path in (weights, recorded):
        forgotten = {k: v for k, v in data.items() if k != owner(path, packages)}
        assert not packaged(path, packages, forgotten)


def test_demo_data_imports_nothing_of_ours() -> None:
    tree = ast.parse((ROOT / "gapforge" / "demo_data" / "__init__.py").read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in imported} <= {"__future__", "pathlib", "warnings"}
