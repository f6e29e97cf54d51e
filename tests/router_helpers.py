"""Test helpers for the router, routed serving and evaluation: a tiny model TAUGHT
(a few real optimizer steps) to answer routing prompts with a chosen label,
random-but-distinct LoRA adapters on the tiny model, and `OpeningsScorer`, a
deterministic router backend of pure data."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

_WORD = re.compile(r"[a-z']+")


def opening_words(text: str) -> frozenset[str]:
    """The words of a first user message, lower-cased; ids, emails and numbers (a token with a digit, '@' or '#') left out."""
    kept = (t for t in text.lower().split() if not any(c.isdigit() or c in "@#" for c in t))
    return frozenset(w for w in _WORD.findall(" ".join(kept)))


class OpeningsScorer:
    """A test stand-in router backend (was the product's `routing.backend: openings`): each capability's score is the
    highest word overlap (Jaccard, ids left out) between the task's first user message and that capability's given
    openings; the none label scores `min_similarity`. Pure data and deterministic, so `portable`: a worker process
    routing with a copy decides exactly as this process does (executor.evaluation plays the routed policy there)."""

    portable = True

    def __init__(self, openings: list[list[str]], *, min_similarity: float = 0.5) -> None:
        self.openings = [[opening_words(o) for o in per] for per in openings]
        self.min_similarity = min_similarity

    def check_labels(self, labels: list[str]) -> None:
        pass

    def scores(self, router: Any, first_user_messages: list[str]) -> list[list[float]]:
        """One row per message: a score per capability (in option order), then the none label's."""
        rows = []
        for message in first_user_messages:
            words = opening_words(message)
            row = [max((len(words & o) / len(words | o) if words | o else 0.0) for o in per) for per in self.openings]
            rows.append([*row, self.min_similarity])
        return rows


def teach_labels(
    src: Path,
    dst: Path,
    prompts: list[str],
    labels: list[str],
    *,
    steps: int = 30,
    lr: float = 4e-3,
    min_margin: float = 1.5,
    seed: int = 0,
) -> Path:
    """Copy the model at `src` to `dst` and train it so the next token after prompts[i] is labels[i]."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(src, dst, dirs_exist_ok=True)
    tok = AutoTokenizer.from_pretrained(dst, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(dst, local_files_only=True)
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rows = [tok.encode(p, add_special_tokens=False) for p in prompts]
    targets = torch.tensor([tok.encode(lab, add_special_tokens=False)[0] for lab in labels])
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    last = torch.tensor([len(r) - 1 for r in rows])
    model.train()
    for _ in range(steps):  # one padded batch per step; stop once every prompt prefers its label by a clear margin
        logits = model(input_ids=ids, attention_mask=mask).logits[torch.arange(len(rows)), last]
        loss = torch.nn.functional.cross_entropy(logits, targets)
        top2 = logits.detach().topk(2, dim=-1)
        if (
            bool((top2.indices[:, 0] == targets).all())
            and float((top2.values[:, 0] - top2.values[:, 1]).min()) > min_margin
        ):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(dst)
    return dst


def shared_taught_model(tmp_path_factory: Any, tiny_model_dir: Path) -> Path:
    """The taught router model, built once per test session (several test modules use it)."""
    from gapforge.agents.router import Router, RoutingConfig, TransformersScorer, make_options

    out = Path(tmp_path_factory.getbasetemp()) / "taught-router"
    if (out / "DONE").exists():
        return out
    scorer = TransformersScorer.from_pretrained(tiny_model_dir)
    router = Router(make_options(capability_specs(), RoutingConfig().labels), scorer)
    prompts, labels = taught_prompts(scorer, router)
    teach_labels(tiny_model_dir, out, prompts, labels)
    (out / "DONE").touch()
    return out


def random_adapter(model_dir: Path, out: Path, seed: int) -> Path:
    """A LoRA adapter with random (non-zero) A and B, so it visibly changes the model's outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    torch.manual_seed(seed)
    cfg = LoraConfig(
        r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(base, cfg)
    peft_model.save_pretrained(out)
    return out


def first_messages() -> dict[str, list[str]]:
    """First user messages per intended label: A (precondition_verification), B (structured_data_reasoning), C (none)."""
    return {
        "A": [
            "I want to return the blender from order 1007, it arrived broken.",
            "Please cancel my order 1012 right away.",
        ],
        "B": ["Add up what I spent across all my orders this year.", "Which of my orders had the most items in total?"],
        "C": ["Hello, what are your opening hours?", "Thanks, that is all for today."],
    }


def taught_prompts(scorer: Any, router: Any) -> tuple[list[str], list[str]]:
    msgs = first_messages()
    pairs = [(m, label) for label, ms in msgs.items() for m in ms]
    return [scorer.render(router.messages(m)) for m, _ in pairs], [label for _, label in pairs]


def capability_specs() -> list[dict[str, Any]]:
    return [
        {
            "name": "precondition_verification",
            "definition": "Check order status, return window, final-sale and ownership before acting.",
            "adapter": "precondition_verification",
        },
        {
            "name": "structured_data_reasoning",
            "definition": "Read nested records and compute totals correctly.",
            "adapter": "structured_data_reasoning",
        },
    ]


def store_trained_capabilities(store: Any, run: str, workspace: Path, model_dir: Path, caps: list[str]) -> None:
    """Each of `caps` retained in `run`, with a random adapter (seeds 3, 4, ...) and the example synthetic env of its
    name (envs/examples/) where the workspace keeps a run's accepted env: a run ready for build_router / evaluate."""
    from gapforge.store.workspace import Workspace

    examples = Path(__file__).resolve().parents[1] / "envs" / "examples"
    ws = Workspace(workspace)
    for seed, cap in enumerate(caps):
        store.put_capability(run, cap, definition=f"{cap} definition")
        store.set_capability_retained(run, cap, True)
        path = random_adapter(model_dir, ws.adapter_dir(run, cap), seed=seed + 3)
        store.put_adapter(run, cap, path=str(path), metrics={}, status="done", capability=cap)
        ws.synthetic_env(run, cap).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(examples / f"{cap}.py", ws.synthetic_env(run, cap))
