"""The SDK reference in the generator prompt documents exactly envs/sdk.py's public API."""

from __future__ import annotations

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
    doc = documented("Class attributes you set", "Methods you write", "Helpers and state for your code",
                     "Runtime API (used by the sandbox, validators and trainers; do not override)")
    assert doc - public == set(), f"documented but not in envs/sdk.py: {sorted(doc - public)}"
    assert public - doc == set(), f"in envs/sdk.py but not documented: {sorted(public - doc)}"
