"""The shipped policy's old place (`artifacts/shop-policy`, in configs and runs stored before it moved into
gapforge/demo_data/) still loads: the config loader reads it at `SHOP_POLICY_DIR` with a one-line FutureWarning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from gapforge.config import load_config
from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.demo_policy.artifact import load_card
from gapforge.run_config import load_tree


@pytest.mark.parametrize("old", ["artifacts/shop-policy", "/work/elsewhere/artifacts/shop-policy/"])
def test_the_old_policy_path_reads_the_moved_policy_with_one_warning_line(tmp_path: Path, old: str) -> None:
    with pytest.warns(FutureWarning) as seen:
        cfg = load_config(None, [f"workspace={tmp_path}", "policy.kind=local", f"policy.local_path={old}"], environ={})
    assert Path(cfg.policy.local_path) == SHOP_POLICY_DIR
    assert load_card(cfg.policy.local_path)["weights_sha256"]  # the bytes moved: the card still matches its weights
    message = str(seen[0].message)
    assert "\n" not in message and str(SHOP_POLICY_DIR) in message


def test_a_stored_run_naming_the_old_path_loads_through_the_same_loader(tmp_path: Path) -> None:
    stored = load_config(None, [f"workspace={tmp_path}"], environ={}).model_dump(mode="json")
    stored["policy"] = {**stored["policy"], "kind": "local", "local_path": "/old/checkout/artifacts/shop-policy"}
    with pytest.warns(FutureWarning):
        cfg = load_tree(stored)
    assert Path(cfg.policy.local_path) == SHOP_POLICY_DIR


def test_other_paths_are_left_alone(tmp_path: Path) -> None:
    existing = tmp_path / "artifacts" / "shop-policy"
    existing.mkdir(parents=True)  # a user's own directory of that name that exists is theirs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in (str(existing), str(tmp_path / "my-model")):
            cfg = load_config(
                None, [f"workspace={tmp_path}", "policy.kind=local", f"policy.local_path={path}"], environ={}
            )
            assert cfg.policy.local_path == path
