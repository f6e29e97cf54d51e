"""The gate's examples and its training (routing.backend=gate; the classifier itself is agents/gate.py).

Examples (`gate_examples`), each a first user message and a class:
- every routed capability's synthetic env, its TRAINING seeds' openings (what its adapter trained on) -> the capability;
- every analysis-split task of the target (`task_labels`): the routed capability the analysis labelled it as needing,
  or `none`. Per labeling pass, a capability is needed by a task when at least half of the task's labelled episodes
  in that pass are PRESENT or LACKING for it, and NA for it otherwise. A task needs the capability when it is needed
  in >= K of the R stored passes (K = analysis.required_passes, at most R), and is `none` when every routed capability
  is NA in >= K passes. A task that needs several goes to the one with the most LACKING labels (then the most
  PRESENT or LACKING, then option order). The rest (labels split across passes, no labels) are left out and counted.
  A capability every labelled analysis task needs (two or more tasks; argument precision applies to every task that
  calls a tool) cannot tell tasks apart and would leave `none` without an example: for it, a task needs it when at
  least one of its episodes is LACKING in >= K passes, and as NA when none is in >= K passes (the base does it there).
  Held-out tasks are never examples: the analysis labelled only its split, and the evaluation plays the held-out one.
  A task whose first message more examples carry under another class is left out (`agree_on_text`).
- The held-out share (`split_examples`): per class, a seeded permutation of its examples sorted by id puts
  ceil(fraction x n) of them (at most n - 1) in `heldout`; the gate is trained on the rest only, and its stored
  accuracy is on the held-out ones, decided as the router decides (abstain below routing.margin -> none).
- The served gate (`routing.gate_refit`, on by default): once measured, the gate is fit again on every example,
  held-out ones included, with the same settings and seed. A question the analysis split asks only in the held-out
  share (the shop's two price questions, say) would otherwise never be trained on, and the gate would send the
  held-out split's price question to the wrong adapter with a wide margin. The stored accuracy stays the first
  fit's: the refit gate has no held-out example left to be measured on.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gapforge.agents.gate import NONE, GateClassifier, HiddenStateEncoder, fit_gate
from gapforge.agents.router import RouterError, RoutingConfig, first_user_message
from gapforge.evaluation import stats
from gapforge.evaluation.router_record import GateAccuracy, GateExample, GateRecord


def task_labels(
    store: Any, run_id: str, capabilities: Sequence[str], *, required_passes: int
) -> tuple[dict[str, tuple[str, str]], dict[str, int]]:
    """({analysis task: (class, first user message)}, {reason left out: tasks}) from the run's stored labels (module doc)."""
    split = store.get_split(run_id)
    if split is None:
        return {}, {"no split stored with the run": 1}
    analysis = set(split.analysis_tasks)
    episodes = {e.id: e for e in store.episodes(run_id, env=split.env) if e.task_id in analysis}
    rows = [lab for lab in store.labels(run_id) if lab.episode_id in episodes]
    passes = sorted({lab.pass_index for lab in rows})
    k = min(required_passes, len(passes))
    votes: dict[tuple[str, str, int], list[bool]] = defaultdict(list)  # (task, capability, pass) -> non-NA per episode
    lacks: dict[tuple[str, str, int], list[bool]] = defaultdict(list)  # (task, capability, pass) -> LACKING per episode
    lacking: Counter[tuple[str, str]] = Counter()
    for lab in rows:
        if lab.capability in capabilities:
            task = episodes[lab.episode_id].task_id
            votes[(task, lab.capability, lab.pass_index)].append(lab.value != "NA")
            lacks[(task, lab.capability, lab.pass_index)].append(lab.value == "LACKING")
            lacking[(task, lab.capability)] += lab.value == "LACKING"

    def status(task: str, cap: str, *, by_lacking: bool = False) -> str | None:
        """'needed' / 'na' in >= K passes, else None (split across passes or not labelled). `by_lacking`: needed means an
        episode LACKING in the pass (a capability every task needs), not at least half of them non-NA."""
        per_pass = [votes[(task, cap, p)] for p in passes if votes.get((task, cap, p))]
        if by_lacking:
            hits = sum(any(lacks[(task, cap, p)]) for p in passes if votes.get((task, cap, p)))
            return "needed" if hits >= k > 0 else "na" if len(per_pass) - hits >= k > 0 else None
        if sum(2 * sum(v) >= len(v) for v in per_pass) >= k > 0:
            return "needed"
        return "na" if sum(2 * sum(v) < len(v) for v in per_pass) >= k > 0 else None

    universal: set[str] = set()
    for cap in capabilities:
        seen = [t for t in sorted(analysis) if any(votes.get((t, cap, p)) for p in passes)]
        if len(seen) >= 2 and all(status(t, cap) == "needed" for t in seen):
            universal.add(cap)
    first: dict[str, tuple[int, str]] = {}
    for e in episodes.values():
        if e.task_id not in first or e.sample < first[e.task_id][0]:
            first[e.task_id] = (e.sample, first_user_message(e.messages) or "")
    out: dict[str, tuple[str, str]] = {}
    left: Counter[str] = Counter()
    for task in sorted(analysis):
        needed, na = [], []
        for i, cap in enumerate(capabilities):
            verdict = status(task, cap, by_lacking=cap in universal)
            if verdict == "needed":
                non_na = sum(sum(votes[(task, cap, p)]) for p in passes if votes.get((task, cap, p)))
                needed.append((lacking[(task, cap)], non_na, -i, cap))
            elif verdict == "na":
                na.append(cap)
        if task not in first:
            left["no episode stored"] += 1
        elif needed:
            out[task] = (max(needed)[3], first[task][1])
        elif len(na) == len(capabilities) and capabilities:
            out[task] = (NONE, first[task][1])
        elif not any(votes.get((task, c, p)) for c in capabilities for p in passes):
            left["not labelled"] += 1
        else:
            left[f"labels split across passes (neither needed nor NA in >= {k} of {len(passes)})"] += 1
    return out, dict(left)


def split_examples(examples: Sequence[GateExample], fraction: float, seed: int) -> list[GateExample]:
    """The examples with `split` set: per class, ceil(fraction x n) (at most n - 1) held out by a seeded permutation."""
    by_class: dict[str, list[GateExample]] = defaultdict(list)
    for ex in sorted(examples, key=lambda e: e.id):
        by_class[ex.label].append(ex)
    held: set[str] = set()
    rng = np.random.default_rng(seed)
    for label in sorted(by_class):
        group = by_class[label]
        n_held = min(len(group) - 1, math.ceil(fraction * len(group))) if fraction > 0 else 0
        held.update(group[i].id for i in rng.permutation(len(group))[:n_held])
    return [ex.model_copy(update={"split": "heldout" if ex.id in held else "train"}) for ex in examples]


def gate_examples(
    store: Any,
    run_id: str,
    capabilities: Sequence[str],
    openings: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    *,
    required_passes: int,
    routing: RoutingConfig,
) -> tuple[list[GateExample], dict[str, int]]:
    """(examples with their split, analysis-split tasks left out by reason): the module doc's examples."""
    missing = [c for c in capabilities if not openings.get(c)]
    if missing:
        raise RouterError(
            f"routing.backend=gate needs the synthetic-env openings of {', '.join(missing)} (their training seeds' first messages)"
        )
    examples = [
        GateExample(id=f"synthetic:{c}:seed={s}", text=t, label=c, split="train")
        for c in capabilities
        for s, t in zip(seeds, openings[c], strict=True)
    ]
    labels, left = task_labels(store, run_id, capabilities, required_passes=required_passes)
    examples += [
        GateExample(id=f"target:{task}", text=text, label=label, split="train")
        for task, (label, text) in sorted(labels.items())
    ]
    examples, dropped = agree_on_text(examples)
    if dropped:
        left = {**left, "same first message as more examples of another class": dropped}
    return split_examples(examples, routing.gate_heldout_fraction, routing.gate_seed), left


def agree_on_text(examples: Sequence[GateExample]) -> tuple[list[GateExample], int]:
    """(the examples without the target tasks whose first message more examples carry under another class, how many
    were left out). No gate on the first message can tell identical messages apart, and a lone example of a class on a
    message that many examples of another carry (a lookup whose episodes never got to the record is `none` by its labels,
    while the same question is the capability's everywhere else) teaches the gate that class for the whole question.
    Synthetic examples are never left out; a tie leaves the target task in."""
    by_text: dict[str, Counter[str]] = defaultdict(Counter)
    for ex in examples:
        by_text[ex.text][ex.label] += 1
    kept = []
    for ex in examples:
        others = [n for label, n in by_text[ex.text].items() if label != ex.label]
        if ex.id.startswith("target:") and others and max(others) > by_text[ex.text][ex.label]:
            continue
        kept.append(ex)
    return kept, len(examples) - len(kept)


def decide(log_probs: np.ndarray, classes: Sequence[str], margin: float) -> list[str]:
    """The router's decision per row (Router.decide): the argmax class; a capability that wins by less than `margin` -> none."""
    out = []
    for row in log_probs:
        order = np.argsort(-row, kind="stable")
        best = classes[int(order[0])]
        out.append(NONE if best != NONE and row[order[0]] - row[order[1]] < margin else best)
    return out


def train_gate(
    encoder: HiddenStateEncoder,
    examples: Sequence[GateExample],
    capabilities: Sequence[str],
    routing: RoutingConfig,
    *,
    left_out: Mapping[str, int] | None = None,
) -> GateRecord:
    """Fit the gate on the `train` examples and measure it on the `heldout` ones (features: one base forward pass each);
    with `routing.gate_refit` the stored (served) gate is then fit on all of them."""
    classes = [*capabilities, NONE]
    train = [e for e in examples if e.split == "train"]
    if not train:
        raise RouterError(
            "routing.backend=gate has no training example: the run needs accepted synthetic envs with training seeds"
        )
    features = encoder.encode([e.text for e in examples])
    is_train = np.array([e.split == "train" for e in examples])

    def fit(
        x: np.ndarray, labels: list[str]
    ) -> GateClassifier:  # the routing.gate_* settings, for the measured and the served fit
        return fit_gate(
            x,
            labels,
            classes,
            hidden=routing.gate_hidden,
            seed=routing.gate_seed,
            epochs=routing.gate_epochs,
            lr=routing.gate_lr,
            weight_decay=routing.gate_weight_decay,
        )

    gate = fit(features[is_train], [e.label for e in train])
    decided = decide(gate.log_probs(features), classes, routing.margin)
    held = [(e.label, d) for e, d in zip(examples, decided) if e.split == "heldout"]
    conf = stats.confusion(held, classes)
    train_acc = float(np.mean([e.label == d for e, d in zip(examples, decided) if e.split == "train"]))
    refit = routing.gate_refit and bool(held)
    if refit:  # the served gate: every example, the same settings (module doc)
        gate = fit(features, [e.label for e in examples])
    settings = {
        "hidden": routing.gate_hidden,
        "epochs": routing.gate_epochs,
        "lr": routing.gate_lr,
        "weight_decay": routing.gate_weight_decay,
        "seed": routing.gate_seed,
        "heldout_fraction": routing.gate_heldout_fraction,
        "margin": routing.margin,
        "refit": refit,
    }
    return GateRecord(
        state=gate.state(max_tokens=encoder.max_tokens),
        settings=settings,
        examples=list(examples),
        heldout=GateAccuracy(accuracy=conf["accuracy"], labels=classes, matrix=conf["matrix"], n=len(held)),
        train_accuracy=train_acc,
        left_out=dict(left_out or {}),
    )


def gate_encoder(backend: Any = None, base_dir: Any = None, *, max_tokens: int) -> HiddenStateEncoder:
    """The base the gate reads: a loaded local backend's own weights (serving.multi_adapter.MultiAdapterModel: adapters off under
    its lock), else a local copy of the base at `base_dir` (a policy served by vLLM: policy.local_path holds the weights it serves)."""
    if backend is not None and all(hasattr(backend, a) for a in ("model", "tokenizer", "base_context")):
        return HiddenStateEncoder(
            lambda: backend.model, backend.tokenizer, context=backend.base_context, max_tokens=max_tokens
        )
    if base_dir is None:
        raise RouterError(
            "routing.backend=gate needs the base model's weights here: a loaded local backend or policy.local_path"
        )
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from gapforge.serving.chat_format import load_tokenizer

    if not (Path(base_dir) / "config.json").is_file():
        raise RouterError(
            f"{base_dir} is not a Hugging Face model directory (no config.json): set policy.local_path to the base the server serves"
        )
    model = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True).eval()
    return HiddenStateEncoder(model, load_tokenizer(base_dir), max_tokens=max_tokens)
