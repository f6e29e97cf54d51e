"""The demo's base policy as a versioned artifact in the repository (`gapforge/demo_data/shop-policy/`, package data).

Teaching costs 30-60 CPU-minutes, so it is spent once, by the project: `gapforge dev teach --ship` builds the taught
tiny policy (demo_policy.teach), measures its shop pass rates exactly as the demo collects
(training.evaluate.shop_rates) and copies weights, tokenizer and `teach.json` (recipe and its hash, build time and
machine, measured pass rates) here. `gapforge demo` loads it and never teaches; a test replays a task subset and
compares with what `teach.json` recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from gapforge.demo_data import SHOP_POLICY_DIR
from gapforge.faults import InputFault

SHIPPED = SHOP_POLICY_DIR
MAX_BYTES = 25 * 1024 * 1024
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
FILES += ("chat_template.jinja", "special_tokens_map.json")


class ArtifactError(InputFault):
    """The shipped policy is missing or broken; the message says how to rebuild it."""


def weights_sha256(path: str | Path) -> str:
    return hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).hexdigest()


def load_card(path: str | Path = SHIPPED) -> dict[str, Any]:
    """The artifact's teach.json (with `weights_sha256` checked against the weights on disk)."""
    p = Path(path)
    card_path = p / "teach.json"
    if not card_path.is_file() or not (p / "model.safetensors").is_file():
        raise ArtifactError(
            f"no shipped base policy in {p}: restore it from git (`git checkout -- {p}`) or rebuild it as "
            "demo_policy/README.md says (`gapforge dev teach --recipe ... --first-pass ... --ship`)"
        )
    card = json.loads(card_path.read_text())
    actual = weights_sha256(p)
    if card.get("weights_sha256") != actual:
        raise ArtifactError(
            f"{p}/model.safetensors does not match teach.json (sha256 {actual[:12]} != "
            f"{str(card.get('weights_sha256'))[:12]}): restore it from git or rebuild it as demo_policy/README.md says"
        )
    return card


def describe(path: str | Path = SHIPPED) -> str:
    """One line naming the artifact: where, its recipe hash and weights hash, its size."""
    card = load_card(path)
    return (
        f"{path} (tiny Qwen3, {card['parameters']:,} parameters, taught offline with planted deficits; "
        f"recipe {card['recipe_hash']}, weights sha256 {card['weights_sha256'][:12]})"
    )


def ship(build: str | Path, dest: str | Path, measured: dict[str, Any]) -> Path:
    """Copy a finished teach build into `dest` with its card (teach.json + measured pass rates + machine)."""
    src, out = Path(build), Path(dest)
    meta = json.loads((src / "teach.json").read_text())
    present = [f for f in FILES if (src / f).is_file()]
    size = sum((src / f).stat().st_size for f in present)
    if size > MAX_BYTES:
        raise ArtifactError(
            f"the build is {size / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB an artifact in the repo may take"
        )
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in present:
        shutil.copy2(src / f, tmp / f)
    _drop_load_flags(tmp / "tokenizer_config.json")
    import torch

    card = {
        **meta,
        "weights_sha256": weights_sha256(tmp),
        "bytes": sum((tmp / f).stat().st_size for f in present),
        "measured": measured,
        "build_wall_s": meta.get("wall_s"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": meta.get("threads"),
        },
        "shipped": time.strftime("%Y-%m-%d"),
    }
    (tmp / "teach.json").write_text(json.dumps(card, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


# How a tokenizer was loaded, which `save_pretrained` writes into its config when it was loaded from disk (a polish
# continuing a build): not part of the tokenizer, and a shipped card must not change with how its build was made.
LOAD_FLAGS = ("is_local", "local_files_only")


def _drop_load_flags(path: Path) -> None:
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    if any(k in config for k in LOAD_FLAGS):
        kept = {k: v for k, v in config.items() if k not in LOAD_FLAGS}  # written as transformers writes it
        path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


# The replay subset a test plays against the shipped card: two tasks of each family, 2 samples each.
SUBSET = ["shop-lookup-001", "shop-lookup-004", "shop-write-001", "shop-write-007", "shop-compound-001"]
SUBSET += ["shop-compound-005", "shop-refusal-001", "shop-refusal-005"]
# The demo's collection settings (gapforge.demo.DEMO_SETTINGS: policy.temperature, rollouts.max_turns, policy.max_new_tokens).
DEMO_SAMPLING = {"temperature": 0.7, "max_turns": 10, "max_new_tokens": 96}


def measure(model_dir: str | Path, *, samples: int = 6, concurrency: int = 8) -> dict[str, Any]:
    """What the card records: pass rates per family on THE shop's 44 tasks as the demo collects them, and the
    replay subset's successes (the shipped-artifact test compares against it)."""
    import asyncio

    from gapforge.training.evaluate import shop_rates

    t0 = time.perf_counter()
    rates = asyncio.run(shop_rates(model_dir, samples=samples, concurrency=concurrency, **DEMO_SAMPLING))
    subset = asyncio.run(shop_rates(model_dir, tasks=SUBSET, samples=2, concurrency=concurrency, **DEMO_SAMPLING))
    return {
        "sampling": {**DEMO_SAMPLING, "samples": samples, "tasks": 44},
        "rates": rates,
        "subset": {"tasks": SUBSET, "samples": 2, **{k: subset["all"][k] for k in ("successes", "episodes")}},
        "measure_s": round(time.perf_counter() - t0, 1),
    }


def speed_reference(path: str | Path = SHIPPED, tokens: int = 96, repeats: int = 3) -> dict[str, float]:
    """One speed reference for this machine: greedy decoding of `tokens` new tokens by the policy at `path`
    (one sequence, one torch thread), the best of `repeats` after a short warm-up. Machines called "2 cores"
    differ by 2x or more; a run's stage times read against this number. One thread always, not the free cores:
    with the count following the load, two references minutes apart on one host read 760 and 943 tokens/s
    (1 and 2 threads), so they did not compare hosts. Torch's thread count is restored afterwards."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    before, threads = torch.get_num_threads(), 1
    torch.set_num_threads(threads)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True).eval()
        ids = tok("Hi, I'd like to return an item from an order I received.", return_tensors="pt").input_ids
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

        def run(n: int) -> tuple[int, float]:
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=pad)
            return int(out.shape[1] - ids.shape[1]), time.perf_counter() - t0

        run(8)  # warm-up: first-call allocations are not the machine's speed
        n, seconds = min((run(tokens) for _ in range(max(1, repeats))), key=lambda r: r[1])
    finally:
        torch.set_num_threads(before)
    return {"tokens": n, "seconds": round(seconds, 4), "tokens_per_s": round(n / seconds, 1), "threads": threads}
