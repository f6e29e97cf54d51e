"""The SDK reference in the generator prompt documents exactly envs/sdk.py's public API, the helpers' signatures included."""

from __future__ import annotations

import inspect
import re

from gapforge.envs import sdk
from gapforge.prompts import load_prompt

BULLET = re.compile(r"^- `([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def sections() -> dict[str, str]:
    body = load_prompt("sdk_reference.md").body
    parts = re.split(r"^## ", body, flags=re.MULTILINE)[1:]
    return {p.splitlines()[0].strip(): p for p in parts}


def documented(*titles: str) -> set[str]:
    found: set[str] = set()
    for title in titles:
        text = sections()[title]
        found |= set(BULLET.findall(text))
        found |= set(re.findall(r"`([a-z_]+)\(", text)) if title.startswith("Runtime API") else set()
    return found


def test_module_names_are_the_sdks_all() -> None:
    assert documented("Module names") == set(sdk.__all__)


def test_class_names_are_the_public_api_of_synthetic_env() -> None:
    public = {n for n in dir(sdk.SyntheticEnv) if not n.startswith("_")} | set(vars(sdk.SyntheticEnv()))
    doc = documented(
        "Class attributes you set",
        "Methods you write",
        "Helpers and state for your code",
        "Runtime API (used by the sandbox, validators and trainers; do not override)",
    )
    assert doc - public == set(), f"documented but not in envs/sdk.py: {sorted(doc - public)}"
    assert public - doc == set(), f"in envs/sdk.py but not documented: {sorted(public - doc)}"


def _spelled(fn) -> str:
    """`name(a, /, **kw)`: a method's parameters after self as the reference spells them (no annotations)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    parts: list[str] = []
    for i, p in enumerate(params):
        parts.append(f"**{p.name}" if p.kind is p.VAR_KEYWORD else p.name)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    return f"{fn.__name__}({', '.join(parts)})"


def test_the_helpers_signatures_are_the_codes() -> None:
    """`called` / `calls_to` take the tool's name positional-only, so a tool argument called `name` can be matched."""
    text = sections()["Helpers and state for your code"]
    for helper in (sdk.SyntheticEnv.calls_to, sdk.SyntheticEnv.called):
        assert f"- `{_spelled(helper)}`" in text, f"the reference spells {helper.__name__} differently from envs/sdk.py"
    assert _spelled(sdk.SyntheticEnv.called) == "called(tool, /, **arguments)"
