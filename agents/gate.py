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
`Router.decide` (argmax, abstain below `routing.margin` = ln(p_top / p_runner_up)).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from gapforge.agents.router import RouterError

NONE = "none"
POOLING = "mean of the last hidden state over the first user message's tokens, rendered alone as a one-turn chat (v1)"


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
    seed: int = 0,
    epochs: int = 300,
    lr: float = 0.05,
    weight_decay: float = 1e-3,
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

    def label_token_ids(self, label: str) -> list[int]:
        return [ord(c) for c in label]

    def scores(self, first_user_messages: list[str]) -> list[list[float]]:
        return self.classifier.log_probs(self.encoder.encode(first_user_messages)).tolist()
