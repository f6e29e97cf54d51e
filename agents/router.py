"""The router: which adapter answers a task (docs/evaluation.md).

The frozen base model reads one routing prompt (prompts/router.md): the target's
name and the opening of its policy document, the task's first user message, one
single-token label per capability (A, B, C, ...) with
its definition and one compacted successful trajectory from its synthetic env,
and one more label meaning "none of these". ONE forward pass; the decision is
the argmax of the next-token log-probabilities over the label tokens (never
generation). A label that is not exactly one token of the tokenizer is refused
when the router is built. When the winner beats the runner-up by less than
`margin` (in log-probability units = logit units), the router abstains to the
base model; "none" also keeps the base model.

Scorers (agents/router_backends.py): transformers directly, or a vLLM server's
completions API asked for the logprobs of the label token ids; or, for a base
model too small to read the routing prompt, the word overlap of the task's first
message with the openings each adapter was trained on (`OpeningsScorer`). The
learned gate (agents/gate.py, `GateScorer`) reads no routing prompt: a classifier
over the base's hidden state of the first user message gives the option scores.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gapforge.agents.errors import ModelError
from gapforge.prompts import load_prompt

ROUTER_PROMPT = "router.md"


class RouterError(ModelError):
    """A router that cannot be built as configured (multi-token label, too few labels); says what to fix."""


class RoutingConfig(BaseModel):
    """The router: which adapter, or the base model, answers each task (docs/evaluation.md)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(True, description="False: every task goes to the base model")
    backend: Literal["transformers", "vllm", "openings", "gate"] = Field(
        "transformers",
        description="transformers / vllm: the base's logprob of each label after the routing prompt; gate: a classifier over "
        "the base's hidden state (docs/evaluation.md); openings: word overlap with each adapter's env openings (tiny bases)",
    )
    openings_min_similarity: float = Field(0.5, ge=0.0, le=1.0, description="backend=openings: the score of `none`")
    gate_hidden: int = Field(
        0, ge=0, le=4096, description="backend=gate: 0 = logistic regression; N = a 2-layer MLP with N hidden units"
    )
    gate_max_tokens: int = Field(256, ge=1, description="backend=gate: tokens of the first user message pooled")
    gate_heldout_fraction: float = Field(
        0.25, ge=0.0, lt=1.0, description="backend=gate: share of each class held out to measure the gate"
    )
    gate_refit: bool = Field(
        True, description="backend=gate: after measuring, fit the served gate again on every example"
    )
    gate_epochs: int = Field(300, ge=1, le=100_000, description="backend=gate: full-batch Adam steps")
    gate_lr: float = Field(0.05, gt=0.0, description="backend=gate: Adam learning rate")
    gate_weight_decay: float = Field(1e-3, ge=0.0, description="backend=gate: L2 penalty (Adam weight decay)")
    gate_seed: int = Field(0, description="backend=gate: seed of the initialisation and the held-out split")
    labels: list[str] = Field(
        default_factory=lambda: list("ABCDEFGHIJKLMNOP"),
        description="capability i gets labels[i], `none` the next one; each must be one token",
    )
    margin: float = Field(
        0.0,
        ge=0.0,
        description="abstain to the base when top minus runner-up score < margin (logprobs; gate: log-odds; openings: overlap)",
    )
    max_example_chars: int = Field(1200, ge=0, description="characters of each capability's example in the prompt")
    max_policy_chars: int = Field(600, ge=0, description="characters of the target's policy document in the prompt")
    batch_size: int = Field(8, ge=1, description="routing prompts per forward pass")
    vllm_base_url: str | None = Field(None, description="backend=vllm: the server's /v1 URL")
    vllm_model: str | None = Field(None, description="backend=vllm: the served base model's name")
    timeout_s: float = Field(30.0, gt=0, description="backend=vllm: seconds per request")

    @field_validator("labels")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(v) < 2 or len(set(v)) != len(v) or any(not s.strip() for s in v):
            raise ValueError("routing.labels needs at least 2 distinct, non-blank labels")
        return v


@dataclass(frozen=True)
class RouteOption:
    """One capability the router may pick: its label, definition, example and the adapter that serves it."""

    label: str
    capability: str
    definition: str
    example: str = ""
    adapter: str | None = None


@dataclass(frozen=True)
class RouteDecision:
    """What the router chose for one task. `adapter` None = the base model (none, abstain or disabled)."""

    label: str | None
    capability: str | None
    adapter: str | None
    margin: float
    abstained: bool
    logprobs: dict[str, float] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """A short name of the choice: the adapter, or 'base'."""
        return self.adapter or "base"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class LabelScorer(Protocol):
    """Next-token log-probabilities of given token ids after chat-templated prompts."""

    def label_token_ids(self, label: str) -> list[int]: ...

    def render(self, messages: list[dict[str, Any]]) -> str: ...

    def label_logprobs(self, prompts: list[str], token_ids: list[int]) -> list[list[float]]: ...


def compact_trajectory(messages: list[Any], max_chars: int) -> str:
    """A successful episode as short lines (`user: ...`, `assistant -> tool(args)`, `tool: ...`), system prompt dropped."""
    lines: list[str] = []
    for m in messages:
        d = m.model_dump() if hasattr(m, "model_dump") else dict(m)
        role = d.get("role")
        if role == "system":
            continue
        text = " ".join(str(d.get("content") or "").split())
        calls = d.get("tool_calls") or []
        if role == "assistant" and calls:
            for tc in calls:
                fn = tc.get("function", tc)
                args = fn.get("arguments", {})
                args = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
                lines.append(f"assistant -> {fn.get('name')}({args})")
            if text:
                lines.append(f"assistant: {text}")
        else:
            lines.append(f"{role}: {text[:200]}")
    out = "\n".join(lines)
    return out if len(out) <= max_chars else out[: max(0, max_chars - 3)] + "..."


def make_options(capabilities: list[dict[str, Any]], labels: list[str]) -> list[RouteOption]:
    """Assign labels in order to capabilities ({name, definition, example?, adapter?}); one label stays for 'none'."""
    if len(capabilities) + 1 > len(labels):
        raise RouterError(
            f"{len(capabilities)} capabilities need {len(capabilities) + 1} labels (one for 'none'): add labels to routing.labels"
        )
    return [
        RouteOption(labels[i], c["name"], c.get("definition", ""), c.get("example", ""), c.get("adapter"))
        for i, c in enumerate(capabilities)
    ]


class Router:
    """Routes first user messages to options with one forward pass of the base model."""

    def __init__(
        self,
        options: list[RouteOption],
        scorer: LabelScorer,
        config: RoutingConfig | None = None,
        *,
        target: str = "",
        policy: str = "",
    ) -> None:
        """`target` (its name) and `policy` (its policy document) name the target's domain in the routing prompt."""
        self.config = config or RoutingConfig()
        self.target = target.strip() or "(not named)"
        self.policy = policy_opening(policy, self.config.max_policy_chars) or "(not given)"
        self.options = list(options)
        self.scorer = scorer
        used = [o.label for o in self.options]
        spare = [lab for lab in self.config.labels if lab not in used]
        if len(set(used)) != len(used) or not spare:
            raise RouterError("option labels must be distinct and leave one label of routing.labels for 'none'")
        self.none_label = spare[0]
        self.labels = [*used, self.none_label]
        self.token_ids = [self._single_token(lab) for lab in self.labels]
        if len(set(self.token_ids)) != len(self.token_ids):
            raise RouterError(
                f"labels {self.labels} map to repeated token ids {self.token_ids}: choose labels with distinct tokens"
            )
        self.prompt = load_prompt(ROUTER_PROMPT)

    def _single_token(self, label: str) -> int:
        ids = self.scorer.label_token_ids(label)
        if len(ids) != 1:
            raise RouterError(
                f"router label {label!r} is {len(ids)} tokens of this tokenizer, not 1: use single-token labels in routing.labels (e.g. A, B, C)"
            )
        return ids[0]

    @property
    def prompt_id(self) -> str:
        return self.prompt.id

    def messages(self, first_user_message: str) -> list[dict[str, Any]]:
        """The routing prompt as one user turn (the scorer renders it with the chat template)."""
        blocks = []
        for o in self.options:
            block = f"{o.label}: {o.capability} — {o.definition.strip()}"
            if o.example:
                block += f"\nExample it solved:\n{o.example}"
            blocks.append(block)
        text = self.prompt.body.format(
            target=self.target,
            policy=self.policy,
            capabilities="\n\n".join(blocks),
            none_label=self.none_label,
            first_user_message=first_user_message.strip(),
            label_list=", ".join(self.labels),
        )
        return [{"role": "user", "content": text}]

    def decide(self, logprobs: list[float]) -> RouteDecision:
        """Argmax over the label logprobs; none / small margin -> the base model."""
        scores = dict(zip(self.labels, logprobs, strict=True))
        order = sorted(range(len(logprobs)), key=lambda i: logprobs[i], reverse=True)
        best = order[0]
        margin = logprobs[best] - logprobs[order[1]]
        label = self.labels[best]
        if label == self.none_label:
            return RouteDecision(label, None, None, margin, False, scores)
        if margin < self.config.margin:
            return RouteDecision(label, None, None, margin, True, scores)
        opt = self.options[best]
        return RouteDecision(label, opt.capability, opt.adapter, margin, False, scores)

    def route_batch(self, first_user_messages: list[str]) -> list[RouteDecision]:
        """Route many tasks: prompts go to the scorer in batches of `routing.batch_size`."""
        if not self.config.enabled or not self.options:
            return [RouteDecision(None, None, None, 0.0, False, {}) for _ in first_user_messages]
        if hasattr(self.scorer, "scores"):  # OpeningsScorer, agents.gate.GateScorer: score the first messages directly
            return [self.decide(r) for r in self.scorer.scores(list(first_user_messages))]
        prompts = [self.scorer.render(self.messages(m)) for m in first_user_messages]
        out: list[RouteDecision] = []
        size = self.config.batch_size
        for start in range(0, len(prompts), size):
            rows = self.scorer.label_logprobs(prompts[start : start + size], self.token_ids)
            out.extend(self.decide(r) for r in rows)
        return out

    def route(self, first_user_message: str) -> RouteDecision:
        return self.route_batch([first_user_message])[0]

    def route_messages(self, messages: list[Any]) -> RouteDecision:
        """Route a conversation on its first user message (no user turn yet -> the base model)."""
        first = first_user_message(messages)
        return self.route(first) if first is not None else RouteDecision(None, None, None, 0.0, False, {})


def policy_opening(policy: str, max_chars: int) -> str:
    """The first lines of a policy document that fit in max_chars (cut inside a line only when the first is longer)."""
    text = policy.strip()
    if len(text) <= max_chars:
        return text
    lines, used = [], 0
    for line in text.splitlines():
        if used + len(line) + 1 > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines) if lines else text[: max(0, max_chars - 3)] + "..."


def first_user_message(messages: list[Any]) -> str | None:
    """The content of the first user turn (dicts or Message objects), None when there is none yet."""
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else getattr(m, "role", None)
        if role == "user":
            content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return None
