"""The learned gate (`routing.backend: gate`; docs/evaluation.md): a small classifier over the frozen base's
hidden state of a task's first user message, a softmax over the routed capabilities plus `none`.

Features (`HiddenStateEncoder`): the first user message is rendered ALONE as a one-turn chat through
the tokenizer's chat template (no system prompt: the target's and the synthetic envs' system prompts
differ, and a gate that saw them would learn "synthetic or not"; no generation prompt), the tokens of
its content are located in that rendering by the tokenizer's offset mapping, and the base model's last
hidden state (after the final norm) is mean-pooled over them (at most `max_tokens` of them; the
rendering after them is not run). One forward pass of the base per message, batch of one (no padding,
so a message's features do not depend on what else is routed with it), adapters off under `context`.

Classifier (`fit_gate`): standardised features, then logistic regression (`hidden=0`) or a 2-layer
MLP (ReLU), trained full-batch with Adam on class-balanced cross-entropy; initialised from `seed`
inside a forked torch RNG (the global RNG is left as it was), so the same examples give the same
weights. Inference (`GateClassifier.log_probs`) is numpy over the stored float32 weights: what the
evaluation decided is what `gapforge serve` decides. `GateScorer` hands the log-probabilities to
`Router.decide` (argmax, abstain below `routing.margin` = ln(p_top / p_runner_up)). The training settings that no
config key sets are the constants below (`EPOCHS`, `LR`, `WEIGHT_DECAY`, `SEED`, `HELDOUT_FRACTION`).

Training (`train_gate`, run by the build_router stage; its `GateRecord` is stored with the run's router,
evaluation/router_record.py) on examples (`gate_examples`), each a first user message and a class:
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
  ceil(HELDOUT_FRACTION x n) of them (at most n - 1) in `heldout`; the gate is trained on the rest only, and its
  stored accuracy is on the held-out ones, decided as the router decides (abstain below routing.margin -> none).
- The served gate (`routing.gate.refit`, on by default): once measured, the gate is fit again on every example,
  held-out ones included, with the same settings and seed. A question the analysis split asks only in the held-out
  share (the shop's two price questions, say) would otherwise never be trained on, and the gate would send the
  held-out split's price question to the wrong adapter with a wide margin. The stored accuracy stays the first
  fit's: the refit gate has no held-out example left to be measured on.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from gapforge.agents.router.config import RoutingConfig
from gapforge.agents.router.router import NONE, Router, RouterError, confusion, first_user_message

if TYPE_CHECKING:
    from gapforge.store import Store

POOLING = "mean of the last hidden state over the first user message's tokens, rendered alone as a one-turn chat (v1)"
EPOCHS = 300  # full-batch Adam steps
LR = 0.05  # Adam learning rate
WEIGHT_DECAY = 1e-3  # L2 penalty (Adam weight decay)
SEED = 0  # seed of the initialisation and of the held-out split
HELDOUT_FRACTION = 0.25  # share of each class held out to measure the gate


def _pack(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def _unpack(s: str, shape: Sequence[int]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f4").reshape(tuple(shape)).astype(np.float64)


class GateLayer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: list[int]  # (out, in)
    weight: str  # float32, little-endian, base64
    bias: str


class GateState(BaseModel):
    """A trained gate's weights as stored with the run (exact float32)."""

    model_config = ConfigDict(extra="forbid")

    pooling: str = POOLING
    classes: list[str]  # the routed capabilities in option order, then "none"
    hidden_size: int  # the base model's hidden size the gate reads
    max_tokens: int
    mean: str
    scale: str
    layers: list[GateLayer]


@dataclass(frozen=True)
class GateClassifier:
    classes: list[str]
    mean: np.ndarray
    scale: np.ndarray
    layers: list[tuple[np.ndarray, np.ndarray]]  # (weight (out, in), bias (out,)); ReLU between layers

    def log_probs(self, features: np.ndarray) -> np.ndarray:
        """(n, classes) log-softmax of the gate's logits."""
        h = (np.asarray(features, dtype=np.float64) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        h = h - h.max(axis=1, keepdims=True)
        return h - np.log(np.exp(h).sum(axis=1, keepdims=True))

    def state(self, *, max_tokens: int) -> GateState:
        layers = [GateLayer(shape=list(w.shape), weight=_pack(w), bias=_pack(b)) for w, b in self.layers]
        return GateState(
            classes=list(self.classes),
            hidden_size=int(self.mean.shape[0]),
            max_tokens=max_tokens,
            mean=_pack(self.mean),
            scale=_pack(self.scale),
            layers=layers,
        )

    @classmethod
    def from_state(cls, s: GateState) -> GateClassifier:
        layers = [(_unpack(x.weight, x.shape), _unpack(x.bias, x.shape[:1])) for x in s.layers]
        return cls(list(s.classes), _unpack(s.mean, [s.hidden_size]), _unpack(s.scale, [s.hidden_size]), layers)


def fit_gate(
    features: np.ndarray,
    labels: Sequence[str],
    classes: Sequence[str],
    *,
    hidden: int = 0,
    seed: int = SEED,
    epochs: int = EPOCHS,
    lr: float = LR,
    weight_decay: float = WEIGHT_DECAY,
) -> GateClassifier:
    """Train the gate on (features, class names). Class-balanced: each class present weighs the same in the loss."""
    import torch

    x = np.asarray(features, dtype=np.float64)
    if len(x) == 0 or len(x) != len(labels):
        raise RouterError(f"the gate needs one feature row per example (got {len(x)} rows for {len(labels)} labels)")
    index = {c: i for i, c in enumerate(classes)}
    unknown = sorted({lab for lab in labels if lab not in index})
    if unknown:
        raise RouterError(f"gate examples labelled {unknown}, not one of the routed classes {list(classes)}")
    mean = x.mean(axis=0).astype(np.float32).astype(np.float64)
    scale = np.maximum(x.std(axis=0), 1e-6).astype(np.float32).astype(np.float64)
    xs = torch.tensor((x - mean) / scale, dtype=torch.float32)
    y = torch.tensor([index[lab] for lab in labels])
    counts = torch.bincount(y, minlength=len(classes)).float()
    present = int((counts > 0).sum())
    weight = torch.where(counts > 0, len(y) / (present * counts.clamp(min=1)), torch.zeros_like(counts))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dims = [x.shape[1], *([hidden] if hidden > 0 else []), len(classes)]
        linears = [torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:])]
    net = torch.nn.Sequential(*[m for lin in linears for m in (lin, torch.nn.ReLU())][:-1])
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight)
    for _ in range(epochs):
        opt.zero_grad()
        loss_fn(net(xs), y).backward()
        opt.step()
    layers = [
        (
            lin.weight.detach().numpy().astype(np.float32).astype(np.float64),
            lin.bias.detach().numpy().astype(np.float32).astype(np.float64),
        )
        for lin in linears
    ]
    return GateClassifier(list(classes), mean, scale, layers)


class HiddenStateEncoder:
    """Pooled last hidden state of the frozen base over a first user message (module doc). `model` is the model or a
    callable returning it (a shared backend may re-wrap its model when adapters load); `context` e.g. the backend's
    lock + adapters off."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        max_tokens: int = 256,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._model = model if callable(model) and not hasattr(model, "forward") else (lambda: model)
        self.tokenizer = tokenizer
        self.context = context or contextlib.nullcontext
        self.max_tokens = max_tokens
        self.template_kwargs = {"enable_thinking": False} if template_kwargs is None else template_kwargs
        if not getattr(tokenizer, "is_fast", False):
            raise RouterError(
                "routing.backend=gate locates the message's tokens by offsets: it needs a fast (tokenizers) tokenizer"
            )

    @property
    def hidden_size(self) -> int:
        return int(self._model().config.hidden_size)

    def span(self, text: str) -> tuple[list[int], list[int]]:
        """(input ids up to the last pooled token, positions of the message's content tokens)."""
        content = text.strip()
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=False, **self.template_kwargs
        )
        start = rendered.find(content) if content else -1
        enc = self.tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
        if start < 0:  # an empty message (or a template that rewrites it): pool over the whole rendering
            keep = list(range(len(ids)))[: self.max_tokens]
        else:
            end = start + len(content)
            keep = [i for i, (s, e) in enumerate(offsets) if s < end and e > start][: self.max_tokens]
        return ids[: keep[-1] + 1], keep

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), hidden_size): one forward pass per text."""
        import torch

        rows = []
        model = self._model()
        with self.context(), torch.inference_mode():
            for text in texts:
                ids, keep = self.span(text)
                out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, logits_to_keep=1)
                rows.append(out.hidden_states[-1][0, keep].double().mean(dim=0).numpy())
        return np.stack(rows) if rows else np.zeros((0, self.hidden_size))


class GateScorer:
    """`Router`'s scorer for routing.backend=gate: per message, the gate's log-probability of each option, then none.
    Holds the base model, so it is not portable (a worker process does not route with a copy)."""

    portable = False

    def __init__(self, encoder: HiddenStateEncoder, classifier: GateClassifier) -> None:
        if classifier.classes[-1:] != [NONE]:
            raise RouterError("a gate's last class must be 'none': rebuild the router (routing.backend=gate)")
        if classifier.mean.shape[0] != encoder.hidden_size:
            raise RouterError(
                f"the stored gate reads hidden size {classifier.mean.shape[0]}, this base has {encoder.hidden_size}: "
                "route with the base the run was trained on, or rebuild the router"
            )
        self.encoder = encoder
        self.classifier = classifier

    def check_labels(self, labels: list[str]) -> None:
        pass  # the gate scores classes, not label tokens

    def scores(self, router: Router, first_user_messages: list[str]) -> list[list[float]]:
        return self.classifier.log_probs(self.encoder.encode(first_user_messages)).tolist()


class GateExample(BaseModel):
    """One example the gate was trained or measured on: its first user message and class."""

    model_config = ConfigDict(extra="forbid")

    id: str  # "synthetic:<capability>:seed=<n>" or "target:<task id>"
    text: str
    label: str  # a routed capability, or "none"
    split: Literal["train", "heldout"]


class GateAccuracy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accuracy: float | None  # None: no held-out example
    labels: list[str]
    matrix: list[list[int]]  # rows = expected, columns = decided (an abstention counts as none)
    n: int


class GateRecord(BaseModel):
    """routing.backend=gate: the trained gate, its examples and how it did on the held-out ones."""

    model_config = ConfigDict(extra="forbid")

    state: GateState
    # the training settings (refit: the served gate saw every example) and the margin it was measured at
    settings: dict[str, bool | int | float]
    examples: list[GateExample]
    heldout: GateAccuracy
    train_accuracy: float
    left_out: dict[str, int] = {}  # analysis-split tasks not used, by reason (task_labels)


def task_labels(
    store: Store, run_id: str, capabilities: Sequence[str], *, required_passes: int
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
    store: Store,
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
    return split_examples(examples, HELDOUT_FRACTION, SEED), left


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
    with `routing.gate.refit` the stored (served) gate is then fit on all of them."""
    classes = [*capabilities, NONE]
    train = [e for e in examples if e.split == "train"]
    if not train:
        raise RouterError(
            "routing.backend=gate has no training example: the run needs accepted synthetic envs with training seeds"
        )
    features = encoder.encode([e.text for e in examples])
    is_train = np.array([e.split == "train" for e in examples])

    def fit(x: np.ndarray, labels: list[str]) -> GateClassifier:  # the measured and the served fit: the same settings
        return fit_gate(x, labels, classes, hidden=routing.gate.hidden)

    gate = fit(features[is_train], [e.label for e in train])
    decided = decide(gate.log_probs(features), classes, routing.margin)
    held = [(e.label, d) for e, d in zip(examples, decided) if e.split == "heldout"]
    conf = confusion(held, classes)
    train_acc = float(np.mean([e.label == d for e, d in zip(examples, decided) if e.split == "train"]))
    refit = routing.gate.refit and bool(held)
    if refit:  # the served gate: every example, the same settings (module doc)
        gate = fit(features, [e.label for e in examples])
    settings = {
        "hidden": routing.gate.hidden,
        "epochs": EPOCHS,
        "lr": LR,
        "weight_decay": WEIGHT_DECAY,
        "seed": SEED,
        "heldout_fraction": HELDOUT_FRACTION,
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


def gate_encoder(
    backend: Any = None, base_dir: Any = None, *, max_tokens: int, load_tokenizer: Callable[[Any], Any]
) -> HiddenStateEncoder:
    """The base the gate reads: a loaded local backend's own weights (serving.multi_adapter.MultiAdapterModel: adapters off under
    its lock), else a local copy of the base at `base_dir` (a policy served by vLLM: policy.local_path holds the weights it serves),
    its tokenizer from `load_tokenizer` (serving.chat_format.load_tokenizer: the policy's chat format)."""
    if backend is not None and all(hasattr(backend, a) for a in ("model", "tokenizer", "base_context")):
        return HiddenStateEncoder(
            lambda: backend.model, backend.tokenizer, context=backend.base_context, max_tokens=max_tokens
        )
    if base_dir is None:
        raise RouterError(
            "routing.backend=gate needs the base model's weights here: a loaded local backend or policy.local_path"
        )
    from transformers import AutoModelForCausalLM

    if not (Path(base_dir) / "config.json").is_file():
        raise RouterError(
            f"{base_dir} is not a Hugging Face model directory (no config.json): set policy.local_path to the base the server serves"
        )
    model = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True).eval()
    return HiddenStateEncoder(model, load_tokenizer(base_dir), max_tokens=max_tokens)


def gate_scorer(state: GateState, capabilities: Sequence[str], encoder: Callable[[], HiddenStateEncoder]) -> GateScorer:
    """The scorer of the run's trained gate over `capabilities` (in option order), reading the hidden states of
    `encoder()` (called once the gate is known to fit): refused when it was trained over others."""
    classifier = GateClassifier.from_state(state)
    if classifier.classes[:-1] != list(capabilities):
        raise RouterError(
            f"the gate was trained over {classifier.classes[:-1]}, the run routes {list(capabilities)}: rebuild it"
        )
    return GateScorer(encoder(), classifier)
