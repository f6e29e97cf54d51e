"""The static gate: cheap checks on generated code BEFORE the sandbox. It only parses the code (never imports or runs
it) and is no security boundary (the sandbox is). It rejects what would waste a sandbox run: code that does not parse,
not exactly one env class, imports beyond the standard library and the SDK, modules that reach for the process,
network or clock, oversize modules. A rejection is evidence for the generator like any failed check.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field

SDK_MODULE = "envs.sdk"
# Standard-library modules a synthetic env has no business with (process, files, network,
# clock, introspection): they make an env nondeterministic or point at an escape attempt.
DENIED = frozenset(
    "os sys subprocess socket ctypes multiprocessing threading asyncio shutil importlib pathlib signal pickle marshal "
    "builtins urllib http time io tempfile glob inspect gc resource pty select selectors ssl ftplib smtplib".split()
)
DENIED_CALLS = frozenset({"eval", "exec", "compile", "open", "__import__", "globals", "breakpoint", "input"})


@dataclass
class GateResult:
    passed: bool
    problems: list[str] = field(default_factory=list)
    env_class: str | None = None

    def to_json(self) -> dict:
        return {"passed": self.passed, "problems": self.problems, "env_class": self.env_class}


def _is_env_base(base: ast.expr) -> bool:
    return (isinstance(base, ast.Name) and base.id == "SyntheticEnv") or (
        isinstance(base, ast.Attribute) and base.attr == "SyntheticEnv"
    )


MAX_CODE_CHARS = 60_000  # most characters of a generated env module (a synthetic env is a few hundred lines)
MAX_CODE_LINES = 1200  # most lines of a generated env module


def static_gate(code: str, *, max_chars: int = MAX_CODE_CHARS, max_lines: int = MAX_CODE_LINES) -> GateResult:
    """Parse `code` (never run it) and list every rule it breaks."""
    problems: list[str] = []
    if len(code) > max_chars:
        problems.append(f"the module has {len(code)} characters; keep it under {max_chars}")
    if code.count("\n") + 1 > max_lines:
        problems.append(f"the module has {code.count(chr(10)) + 1} lines; keep it under {max_lines}")
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return GateResult(False, [*problems, f"SyntaxError at line {e.lineno}: {e.msg}"])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append(
                    f"line {node.lineno}: relative import; import only the standard library and {SDK_MODULE}"
                )
                continue
            names = [node.module or ""]
        else:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DENIED_CALLS:
                problems.append(f"line {node.lineno}: call to {node.func.id}() is not allowed in an env module")
            continue
        for name in names:
            top = name.split(".")[0]
            if name == SDK_MODULE or (top == "__future__"):
                continue
            if top == "envs":
                problems.append(
                    f"line {node.lineno}: import of {name}; of gapforge only {SDK_MODULE} exists in the sandbox"
                )
            elif top in DENIED:
                problems.append(
                    f"line {node.lineno}: import of {name} is not allowed (process/files/network/clock); use self.rng and self.db"
                )
            elif top not in sys.stdlib_module_names:
                problems.append(
                    f"line {node.lineno}: import of {name}: only the standard library and {SDK_MODULE} are available"
                )
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(_is_env_base(b) for b in n.bases)]
    if len(classes) != 1:
        found = ", ".join(c.name for c in classes) or "none"
        problems.append(f"the module must define exactly one subclass of SyntheticEnv at top level (found: {found})")
    return GateResult(not problems, problems, classes[0].name if len(classes) == 1 else None)
