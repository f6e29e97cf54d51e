"""The router: which adapter answers a task (docs/evaluation.md).

`Router` holds the options (one single-token label per capability, with its definition, one compacted successful
trajectory from its synthetic env and its adapter) and one more label meaning "none of these". A backend
(`Scorer`) gives, per first user message, one score per option and then `none`'s; the decision is the argmax.
When the winner beats the runner-up by less than `routing.margin` (logprob units for the label scorer, log-odds
for the gate), the router abstains to the base model; "none" also keeps the base model.

Backends, one per module: the paper's label scorer (`labels.py`: the frozen base's next-token log-probabilities
of the label tokens after the routing prompt, prompts/router.md, built here by `Router.messages`; a local model or
a vLLM server's completions) and the learned gate (`gate.py`: a classifier over the base's hidden state of the
first user message).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from gapforge.agents.errors import ModelError
from gapforge.agents.router.config import RoutingConfig
from gapforge.prompts import load_prompt

ROUTER_PROMPT = "router.md"
NONE = "none"  # the class of a task no routed capability covers: the base model plays it
MAX_POLICY_CHARS = 600  # characters of the target's policy document in the routing prompt


class RouterError(ModelError):
    """A router that cannot be built as configured (multi-token label, too few labels); says what to fix."""


class Scorer(Protocol):
    """A router backend: per first user message, one score per option (in option order), then the none label's.
    `portable`: pure data, so a worker process routing with a copy decides exactly as this process does."""

    portable: bool

    def check_labels(self, labels: list[str]) -> None:
        """Refuse labels this backend cannot score (RouterError), when the router is built."""
        ...

    def scores(self, router: Router, first_user_messages: list[str]) -> list[list[float]]: ...


class NoScorer:
    """The scorer of a router with no option to route to: every task stays on the base and nothing is scored."""

    portable = True

    def check_labels(self, labels: list[str]) -> None:
        pass

    def scores(self, router: Router, first_user_messages: list[str]) -> list[list[float]]:
        raise RouterError("a router without options scores nothing")


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
            f"{len(capabilities)} capabilities need {len(capabilities) + 1} labels (one for 'none'): add labels to "
            "routing.labels"
        )
    return [
        RouteOption(labels[i], c["name"], c.get("definition", ""), c.get("example", ""), c.get("adapter"))
        for i, c in enumerate(capabilities)
    ]


class Router:
    """Routes first user messages to options with the scores of one backend."""

    def __init__(
        self,
        options: list[RouteOption],
        scorer: Scorer,
        config: RoutingConfig | None = None,
        *,
        target: str = "",
        policy: str = "",
    ) -> None:
        """`target` (its name) and `policy` (its policy document) name the target's domain in the routing prompt."""
        self.config = config or RoutingConfig()
        self.target = target.strip() or "(not named)"
        self.policy = policy_opening(policy, MAX_POLICY_CHARS) or "(not given)"
        self.options = list(options)
        self.scorer = scorer
        used = [o.label for o in self.options]
        spare = [lab for lab in self.config.labels if lab not in used]
        if len(set(used)) != len(used) or not spare:
            raise RouterError("option labels must be distinct and leave one label of routing.labels for 'none'")
        self.none_label = spare[0]
        self.labels = [*used, self.none_label]
        scorer.check_labels(self.labels)
        self.prompt = load_prompt(ROUTER_PROMPT)

    @property
    def prompt_id(self) -> str:
        return self.prompt.id

    def messages(self, first_user_message: str) -> list[dict[str, Any]]:
        """The routing prompt as one user turn (the label scorer renders it with the chat template)."""
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
        """Argmax over the label scores; none / small margin -> the base model."""
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
        """Route many tasks (the label scorer sends its prompts in batches of `routing.batch_size`)."""
        if not self.config.enabled or not self.options:
            return [RouteDecision(None, None, None, 0.0, False, {}) for _ in first_user_messages]
        return [self.decide(r) for r in self.scorer.scores(self, list(first_user_messages))]

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


def confusion(pairs: Sequence[tuple[str, str]], labels: Sequence[str]) -> dict[str, object]:
    """Router accuracy and confusion matrix from (expected, predicted) names; rows = expected."""
    index = {name: i for i, name in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for expected, predicted in pairs:
        matrix[index[expected]][index[predicted]] += 1
    correct = sum(matrix[i][i] for i in range(len(labels)))
    return {
        "labels": list(labels),
        "matrix": matrix,
        "accuracy": correct / len(pairs) if pairs else None,
        "n": len(pairs),
    }
