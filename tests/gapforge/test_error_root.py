"""One error root: every exception class the project's packages define derives from
`gapforge.faults.GapforgeError` through the class of its boundary (or is on a short list of
exceptions that never leave their process, with the reason), the blame of the classes that are
easy to get wrong is pinned, and the CLI turns one instance of each boundary into one line with
that boundary's exit code."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gapforge.faults import (
    BOUNDARIES,
    EndpointFault,
    EnvCodeFault,
    GapforgeError,
    InputFault,
    ModelFault,
    ResumableStop,
    SandboxFault,
    StoreFault,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "gapforge",
    "ui",
    "graph",
    "executor",
    "evaluation",
    "agents",
    "training",
    "serving",
    "sandbox",
    "envs",
    "store",
    "prompts",
    "demo_policy",
)

# Exceptions that are not gapforge's errors on purpose: each is caught where it is raised (it never leaves its
# process, nor the function that turns it into data), and the SDK's and the server's run where gapforge cannot be
# imported at all.
NOT_OURS = {
    # the SDK generated env code sees: stdlib only, importable in the bare sandbox image without gapforge
    "gapforge.envs.sdk.ToolError": "sdk",
    "gapforge.envs.sdk._CallError": "sdk",
    "gapforge.envs.sdk.EnvDefinitionError": "sdk",
    "gapforge.envs.sdk.ProtocolError": "sdk",
    # the in-container server's flow control (a BaseException so env code cannot catch it); stdlib only
    "gapforge.sandbox.server.OutputFlood": "in-sandbox server",
    # a tool's refusal the shop env turns into that tool's result: the agent's data, as the SDK's ToolError is
    "gapforge.envs.shop.tools.ToolError": "tool refusal",
    # the episode loop's flow control: `bounded` raises it and its callers in agents/ turn it into the episode's
    # `timeout` termination naming what it waited on (env, sandbox, policy, worker): data, never raised further
    "gapforge.agents.episode.TimedOut": "episode time limit",
}
# ToolSandbox's worker runs in ToolSandbox's own interpreter (its pins conflict with gapforge's) and talks JSON
NOT_OURS_PREFIXES = ("gapforge.envs.toolsandbox.worker.",)
BUILTIN_EXCEPTIONS = {
    name for name, obj in vars(builtins).items() if inspect.isclass(obj) and issubclass(obj, BaseException)
}


def _exempt(qualname: str) -> bool:
    return qualname in NOT_OURS or qualname.startswith(NOT_OURS_PREFIXES)


def _modules() -> dict[str, Path]:
    """Module name -> source file of every module of the project (the folders are gapforge's subpackages)."""
    found = {}
    for pkg in PACKAGES:
        prefix = ("gapforge",) if pkg == "gapforge" else ("gapforge", pkg)
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = prefix + path.relative_to(ROOT / pkg).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _project_exceptions() -> tuple[dict[str, type[BaseException]], list[str]]:
    """Every exception class defined in an importable project module, and the modules that need a package not installed."""
    found: dict[str, type[BaseException]] = {}
    unimportable = []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] in PACKAGES:
                raise
            unimportable.append(name)
            continue
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found, unimportable


def test_every_exception_class_derives_from_a_boundary_of_the_root() -> None:
    found, _unimportable = (
        _project_exceptions()
    )  # modules needing an extra not installed here: the source check below reads them
    assert (
        "gapforge.store.errors.StoreError" in found and "gapforge.sandbox.errors.EnvCodeError" in found
    )  # the walk sees the packages
    strays = sorted(q for q, cls in found.items() if not issubclass(cls, GapforgeError) and not _exempt(q))
    assert strays == [], (
        f"derive these from their boundary class in gapforge/faults.py (or list them in NOT_OURS with a reason): {strays}"
    )
    unbounded = sorted(
        q
        for q, cls in found.items()
        if issubclass(cls, GapforgeError)
        and not issubclass(cls, BOUNDARIES)
        and cls is not GapforgeError
        and q != "gapforge.prompts.PromptError"
    )  # a missing prompt file: gapforge's own packaging
    assert unbounded == [], f"derive these from one boundary class, not from the root: {unbounded}"
    assert all(q in found for q in NOT_OURS), "an allowed exception moved or was renamed: update NOT_OURS"


def test_no_class_in_any_module_subclasses_a_builtin_exception_alone() -> None:
    """The same rule read from the source, so it also holds in modules this environment cannot import."""
    strays = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or not node.bases:
                continue
            bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
            qualname = f"{name}.{node.name}"
            if (
                all(b in BUILTIN_EXCEPTIONS for b in bases)
                and qualname != "gapforge.faults.GapforgeError"
                and not _exempt(qualname)
            ):
                strays.append(f"{qualname}({', '.join(bases)})")
    assert strays == []


def test_the_root_module_imports_nothing() -> None:
    """Every layer imports it: it may import only the standard library's typing (and gapforge/__init__.py, which every
    import of gapforge.<folder> runs first, only the standard library)."""
    tree = ast.parse((ROOT / "gapforge" / "faults.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}
    init = ast.parse((ROOT / "gapforge" / "__init__.py").read_text(encoding="utf-8"))
    init_imports = {a.name for n in ast.walk(init) if isinstance(n, ast.Import) for a in n.names}
    init_imports |= {n.module or "" for n in ast.walk(init) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in init_imports} <= {"__future__", *sys.stdlib_module_names}


def test_blame_lands_on_the_boundary_where_it_happened() -> None:
    from gapforge.agents.errors import IncompleteStage, ModelEndpointError, ModelError, StructuredOutputError
    from gapforge.envs.errors import EndpointError, EnvError, InfrastructureFailure, MalformedOutputError
    from gapforge.executor.processes import WorkerLost
    from gapforge.sandbox.errors import EnvCodeError, SandboxError, SandboxLost
    from gapforge.store.errors import StoreError

    assert issubclass(EnvCodeError, EnvCodeFault) and not issubclass(
        EnvCodeError, SandboxFault
    )  # the env's code, not the sandbox
    assert issubclass(SandboxLost, SandboxError) and SandboxLost.infrastructure and SandboxLost.exit_code == 3
    assert issubclass(ModelEndpointError, EndpointFault) and issubclass(
        ModelEndpointError, ModelError
    )  # still caught as a ModelError
    assert issubclass(EndpointError, EndpointFault) and EndpointError.termination == "endpoint_error"
    assert issubclass(StructuredOutputError, ModelFault) and issubclass(MalformedOutputError, ModelFault)
    assert StructuredOutputError.boundary == "model" and ModelEndpointError.boundary == "endpoint"
    assert IncompleteStage.exit_code == WorkerLost.exit_code == InfrastructureFailure.exit_code == 3
    assert IncompleteStage.infrastructure and issubclass(IncompleteStage, ResumableStop)
    assert issubclass(EnvError, InputFault) and issubclass(StoreError, StoreFault)
    assert not ModelError.infrastructure and not EnvCodeError.infrastructure and not SandboxError.infrastructure


@pytest.mark.parametrize(
    "error",
    [
        InputFault("analysis.passes=0: set it to 1 or more\n(a second line)"),
        EndpointFault("the labeling endpoint kept failing (HTTP 503) past 4 retries"),
        SandboxFault("no Docker daemon reachable: start dockerd"),
        EnvCodeFault("env exception in step(): KeyError 'order'"),
        ModelFault("the analyst's structured output stayed malformed after the re-ask"),
        StoreFault("run 'r9' is not in the store: list runs with `gapforge runs`"),
        ResumableStop(
            "collect_rollouts: 3 of 40 episodes ended in endpoint_error: resume with `gapforge run --resume r1`"
        ),
    ],
    ids=lambda e: type(e).__name__,
)
def test_the_cli_prints_each_boundary_as_one_line_with_its_exit_code(error: GapforgeError) -> None:
    from gapforge.cli_common import handle_errors

    @handle_errors
    def command() -> None:
        raise error

    probe = typer.Typer()
    probe.command()(command)
    res = CliRunner().invoke(probe, [])
    assert (
        res.exit_code
        == type(error).exit_code
        == (3 if type(error).infrastructure else 4 if isinstance(error, EnvCodeFault) else 2)
    )
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines == ["error: " + str(error).splitlines()[0]], res.output


def test_a_subclass_keeps_its_own_exit_code_through_the_cli() -> None:
    """SandboxLost is the sandbox's (a SandboxError) yet resumable: the CLI reads the class, not a list."""
    from gapforge.cli_common import handle_errors
    from gapforge.sandbox.errors import SandboxLost

    @handle_errors
    def command() -> None:
        raise SandboxLost("killed", "container killed from outside", method="step")

    probe = typer.Typer()
    probe.command()(command)
    res = CliRunner().invoke(probe, [])
    assert (
        res.exit_code == 3
        and res.output.strip() == "error: sandbox killed during step(): container killed from outside"
    )
