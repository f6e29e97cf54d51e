"""Where the offline demo's data lives, one constant each (package data: a wheel install carries it).

- `SHOP_POLICY_DIR`: the shipped tiny base policy (weights, tokenizer, chat template, its card `teach.json`).
- `RECORDINGS_DIR`: the recorded generator / reviewer answers (`shop.yaml` + the env modules in `shop/`).

Every reader goes through these names. Imports nothing of ours, so any layer may read it (`/.importlinter`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

_HERE = Path(__file__).resolve().parent
SHOP_POLICY_DIR = _HERE / "shop-policy"
RECORDINGS_DIR = _HERE / "recordings"

# Where the shipped policy was until 2026-11-27 (configs and stored runs may still name it).
OLD_SHOP_POLICY = ("artifacts", "shop-policy")


def moved_shop_policy(path: str) -> str:
    """`path`, or the shipped policy's directory when `path` is its old location (`artifacts/shop-policy`, relative
    or absolute) and nothing is there any more; that case warns once in one line (FutureWarning)."""
    p = Path(path)
    if p.parts[-2:] != OLD_SHOP_POLICY or p.exists():
        return path
    warnings.warn(
        f"policy.local_path={path}: the shipped policy moved to {SHOP_POLICY_DIR} (gapforge.demo_data.SHOP_POLICY_DIR); "
        "reading it there — drop policy.local_path (the demo's default) or name the new directory",
        FutureWarning,
        stacklevel=3,
    )
    return str(SHOP_POLICY_DIR)
