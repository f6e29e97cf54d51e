"""docs/sdk.md is prompts/sdk_reference.md (the generator's SDK reference) with an introduction: generated, and stale
copies fail here; its link to the hand-written env steps lands on a heading of docs/your-agent.md."""

from __future__ import annotations

import re
from pathlib import Path

from gapforge.prompts import load_prompt
from gapforge.sdk_reference import EXAMPLES, HAND_WRITTEN, REGENERATE, render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docs_sdk_md_is_the_generated_reference() -> None:
    page = DOCS / "sdk.md"
    assert page.is_file(), f"docs/sdk.md is missing: run `{REGENERATE}`"
    assert page.read_text() == render(), f"docs/sdk.md is stale: run `{REGENERATE}`"


def test_the_page_holds_the_prompts_reference_unchanged() -> None:
    body = load_prompt("sdk_reference.md").body.strip()
    title, _, rest = body.partition("\n")
    text = render()
    assert text.startswith(title + "\n") and rest.strip() in text
    assert "`called(tool, /, **arguments)`" in text


def test_its_links_land() -> None:
    page, _, anchor = HAND_WRITTEN.partition("#")
    headings = [line.lstrip("#") for line in (DOCS / page).read_text().splitlines() if line.startswith("## ")]
    assert anchor in {_slug(h) for h in headings}, f"docs/{page} has no heading with the anchor #{anchor}"
    assert all((DOCS.parent / "envs" / "examples" / name).is_file() for name in EXAMPLES)
