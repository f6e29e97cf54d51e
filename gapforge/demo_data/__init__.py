"""Where the offline demo's data lives, one constant each (package data: a wheel install carries it).

- `SHOP_POLICY_DIR`: the shipped tiny base policy (weights, tokenizer, chat template, its card `teach.json`).
- `RECORDINGS_DIR`: the recorded generator / reviewer answers (`shop.yaml` + the env modules in `shop/`).

Every reader goes through these names. Imports nothing of ours, so any layer may read it (`/.importlinter`).
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
SHOP_POLICY_DIR = _HERE / "shop-policy"
RECORDINGS_DIR = _HERE / "recordings"
