from __future__ import annotations

from importlib import resources

import pytest

from gapforge import prompts
from gapforge.prompts import PromptError, load_prompt


def test_every_prompt_file_has_a_name_and_version() -> None:
    files = [
        f.name
        for f in resources.files("gapforge.prompts").iterdir()
        if f.name.endswith(".md") and f.name != "README.md"
    ]
    assert {"shop_user_simulator.md", "structured_reask.md"} <= set(files)
    for name in files:
        p = load_prompt(name)
        assert p.name == name.removesuffix(".md") and p.version.isdigit()
        assert p.id == f"{p.name}@{p.version}" and not p.body.startswith("---")


def test_placeholders_survive_the_header() -> None:
    body = load_prompt("shop_user_simulator.md").body
    assert "{goal}" in body and "{facts}" in body and "{stop}" in body
    assert "{error}" in load_prompt("structured_reask.md").body


def test_missing_file_or_header_is_a_prompt_error(tmp_path, monkeypatch) -> None:
    with pytest.raises(PromptError, match="does not exist"):
        load_prompt("nope.md")
    (tmp_path / "bad.md").write_text("no header here\n")
    (tmp_path / "noversion.md").write_text("---\nname: x\n---\nbody\n")
    monkeypatch.setattr(prompts, "resources", type("R", (), {"files": staticmethod(lambda _pkg: tmp_path)}))
    with pytest.raises(PromptError, match="needs a '---' header"):
        load_prompt("bad.md")
    with pytest.raises(PromptError, match="must set name and version"):
        load_prompt("noversion.md")
