"""docs/config.md is the config tree as the code defines it: generated, and stale copies fail here."""

from __future__ import annotations

from pathlib import Path

from gapforge.config import GapforgeConfig
from gapforge.config_reference import KEYS_LINE, REGENERATE, keys, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference() -> None:
    assert DOC.is_file(), f"docs/config.md is missing: run `{REGENERATE}`"
    assert DOC.read_text() == render(), f"docs/config.md is stale: run `{REGENERATE}`"


def test_every_key_of_the_tree_has_a_row_and_the_count_says_how_many() -> None:
    """At most 150 keys (issue 62: a config a person can read), each in one row, and the doc's count is theirs."""
    text, tree = render(), keys(GapforgeConfig())
    missing = [k for k in tree if f"\n- `{k}` (" not in text]
    rows = [line for line in text.splitlines() if line.startswith("- `") and "` (" in line.split(":")[0]]
    assert not missing and len(rows) == len(tree) and 100 < len(tree) <= 150
    assert KEYS_LINE.format(n=len(tree)) in text


def test_a_row_carries_type_default_bounds_and_description() -> None:
    row = next(line for line in render().splitlines() if line.startswith("- `store.lease_ttl_s` ("))
    assert row.startswith("- `store.lease_ttl_s` (float, `120.0`, ≥ 1.0, ≤ 3600.0): ") and "heartbeat" in row
    literal = next(line for line in render().splitlines() if line.startswith("- `training.generation` ("))
    assert '"transformers" | "vllm_server" | "vllm_colocate"' in literal


def test_section_defaults_come_from_the_default_tree_and_checks_are_listed() -> None:
    text = render()
    # executor.training is built with a GPU and Docker, executor.rollout with the class defaults
    assert (
        "- `executor.training.num_gpus` (float, `1.0`" in text and "- `executor.rollout.num_gpus` (float, `0.0`" in text
    )
    assert "- max_new_tokens ({…}) must be <= max_completion_length ({…})" in text
    assert "| `GAPFORGE_STORE_URL` | `store.url` |" in text
