"""The demo's base policy shipped in the repository: intact, small, and as good as its card says."""

from __future__ import annotations

import asyncio
import json

import pytest

from gapforge.demo_policy.artifact import (
    MAX_BYTES,
    SHIPPED,
    SUBSET,
    ArtifactError,
    describe,
    load_card,
    ship,
    weights_sha256,
)

# The replay runs the demo's own sampling (per-episode seeds), so on the machine that measured the card it is
# exact; another CPU may round a logit differently and flip a sampled token: allow 2 of the 16 episodes.
TOLERANCE = 2


def test_the_shipped_policy_is_intact_and_small() -> None:
    card = load_card(SHIPPED)
    assert card["weights_sha256"] == weights_sha256(SHIPPED)
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) <= MAX_BYTES
    assert card["measured"]["rates"]["all"]["episodes"] == 44 * card["measured"]["sampling"]["samples"]
    assert {"lookup_and_answer", "single_write", "compound_multi_step", "policy_refusal"} <= set(
        card["measured"]["rates"]
    )
    assert card["recipe_hash"] in describe(SHIPPED) and card["weights_sha256"][:12] in describe(SHIPPED)


def test_the_shipped_policy_replays_its_card_on_a_task_subset() -> None:
    from gapforge.training.evaluate import shop_rates

    card = load_card(SHIPPED)["measured"]
    rates = asyncio.run(
        shop_rates(SHIPPED, tasks=SUBSET, samples=card["subset"]["samples"], concurrency=8, **_sampling(card))
    )
    assert rates["all"]["episodes"] == card["subset"]["episodes"] == len(SUBSET) * 2
    assert abs(rates["all"]["successes"] - card["subset"]["successes"]) <= TOLERANCE, (rates["all"], card["subset"])


def test_a_tampered_artifact_is_refused_with_the_fix(tmp_path) -> None:
    for f in SHIPPED.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    card = json.loads((tmp_path / "teach.json").read_text())
    card["weights_sha256"] = "0" * 64
    (tmp_path / "teach.json").write_text(json.dumps(card))
    with pytest.raises(ArtifactError, match="restore it from git"):
        load_card(tmp_path)
    with pytest.raises(ArtifactError, match="no shipped base policy"):
        load_card(tmp_path / "missing")


def test_ship_keeps_the_tokenizer_config_free_of_how_it_was_loaded(tmp_path) -> None:
    """A polish saves a tokenizer loaded from disk, and save_pretrained adds `is_local` / `local_files_only`: the
    shipped file is the tokenizer's config only, byte for byte what a from-scratch build writes."""
    build = tmp_path / "build"
    build.mkdir()
    for f in SHIPPED.iterdir():
        (build / f.name).write_bytes(f.read_bytes())
    clean = (SHIPPED / "tokenizer_config.json").read_text()
    (build / "tokenizer_config.json").write_text(
        json.dumps({**json.loads(clean), "is_local": True, "local_files_only": False})
    )
    out = ship(build, tmp_path / "shipped", {"rates": {}})
    assert (out / "tokenizer_config.json").read_text() == clean
    assert load_card(out)["bytes"] == sum(f.stat().st_size for f in out.iterdir() if f.name != "teach.json")
    assert load_card(out)["weights_sha256"] == weights_sha256(SHIPPED)


def _sampling(card: dict) -> dict:
    s = card["sampling"]
    return {"temperature": s["temperature"], "max_turns": s["max_turns"], "max_new_tokens": s["max_new_tokens"]}


def test_the_speed_reference_times_exactly_the_tokens_it_asked_for(monkeypatch) -> None:
    import os

    import torch

    import gapforge.training.cpu  # noqa: F401 (loads the submodule that the name below reaches)
    from gapforge import training
    from gapforge.demo_policy.artifact import speed_reference

    # an idle 2-core machine: a reference on the free cores would take 2 threads here, and 1 under load
    monkeypatch.setattr(training.cpu, "free_cores", lambda: 2)
    before = torch.get_num_threads()
    odd = (os.cpu_count() or 1) + 3  # a count the reference never sets
    torch.set_num_threads(odd)
    try:
        s = speed_reference(SHIPPED, tokens=24, repeats=2)
        assert torch.get_num_threads() == odd  # the caller's thread count is given back
    finally:
        torch.set_num_threads(before)
    assert (
        s["tokens"] == 24 and s["threads"] == 1 and s["seconds"] > 0
    )  # one thread whatever the load: comparable across hosts
