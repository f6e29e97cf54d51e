"""The static gate parses generated code and never runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gapforge.agents.synthesis.static_gate import static_gate

ROOT = Path(__file__).parents[3]
HEAD = "from envs.sdk import SyntheticEnv, tool\n"


@pytest.mark.parametrize("path", sorted((ROOT / "envs" / "examples").glob("[a-z]*.py")))
def test_examples_pass(path: Path) -> None:
    result = static_gate(path.read_text())
    assert result.passed, result.problems
    assert result.env_class and result.env_class.endswith("Env")


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (HEAD + "class A(SyntheticEnv)\n    pass\n", "SyntaxError at line 2"),
        (
            HEAD + "class A(SyntheticEnv): pass\nclass B(SyntheticEnv): pass\n",
            "exactly one subclass of SyntheticEnv at top level (found: A, B)",
        ),
        (HEAD + "x = 1\n", "(found: none)"),
        ("import numpy\n" + HEAD + "class A(SyntheticEnv): pass\n", "import of numpy: only the standard library"),
        ("import time\n" + HEAD + "class A(SyntheticEnv): pass\n", "import of time is not allowed"),
        ("from os import path\n" + HEAD + "class A(SyntheticEnv): pass\n", "import of os is not allowed"),
        (
            "from envs.shop import tools\n" + HEAD + "class A(SyntheticEnv): pass\n",
            "only envs.sdk exists in the sandbox",
        ),
        ("from . import x\n" + HEAD + "class A(SyntheticEnv): pass\n", "relative import"),
        (HEAD + "class A(SyntheticEnv):\n    def generate(self, seed):\n        return eval('1')\n", "call to eval()"),
    ],
)
def test_rejections_say_what_to_fix(code: str, needle: str) -> None:
    result = static_gate(code)
    assert not result.passed
    assert any(needle in p for p in result.problems), result.problems


def test_size_limits() -> None:
    code = HEAD + "class A(SyntheticEnv):\n    pass\n" + "# filler\n" * 100
    assert static_gate(code, max_lines=50).problems[0].startswith("the module has 104 lines")
    assert "characters" in static_gate(code, max_chars=500).problems[0]


def test_the_gate_never_executes_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n" + HEAD + "class A(SyntheticEnv): pass\n"
    result = static_gate(code)
    assert not marker.exists()
    assert not result.passed and any("pathlib" in p for p in result.problems)
