"""Exact tokens for multi-turn rollouts (docs/training.md, "Exact tokens").

A rollout is one token stream: the prompt ids, then alternately the ids the sampler produced (with their logprobs;
loss mask 1) and the ids of the env's turns (tool results, simulated-user replies, the next generation prompt; loss
mask 0). Env turns are appended as the *delta* of the chat template: render the conversation up to the assistant turn
and up to the next generation prompt, take the text after the end of the assistant turn, tokenize only that. The
conversation is never re-rendered and re-tokenized as a whole, so the ids the loss sees are the ids the sampler
produced.

That only works when the template is prefix-preserving (rendering k messages is a prefix of rendering k+1). Templates
that rewrite history (e.g. Qwen3's stripping of old `<think>` blocks) are refused with `TemplateDriftError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gapforge.envs.protocol import Message
from gapforge.faults import InputFault
from gapforge.serving.local import to_template_messages


class TemplateDriftError(InputFault, ValueError):
    """The chat template is not prefix-preserving: training on it would drift tokens."""


def render(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]], *, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        to_template_messages(messages), tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def env_delta(tokenizer: Any, history: list[Message], env_messages: list[Message], tools: list[dict[str, Any]]) -> str:
    """The text the template adds after the last assistant turn (which ends `history`) for the env's messages plus the
    next generation prompt. The sampled turn itself ended with the eos token; whatever the template writes after its
    own eos (e.g. a newline) opens the delta."""
    eos = tokenizer.eos_token
    before = render(tokenizer, history, tools, generation_prompt=False)
    after = render(tokenizer, history + env_messages, tools, generation_prompt=True)
    if not after.startswith(before):
        at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        raise TemplateDriftError(
            "the chat template is not prefix-preserving (adding a turn rewrote earlier text at char "
            f"{at}: {before[at : at + 40]!r} -> {after[at : at + 40]!r}); exact-token training would train on drifted "
            "tokens: use a template that renders history unchanged (e.g. keep reasoning in history)"
        )
    cut = before.rfind(eos)
    if cut < 0:
        raise TemplateDriftError(f"the chat template does not end an assistant turn with the eos token {eos!r}")
    return before[cut + len(eos) :] + after[len(before) :]


def check_prefix_preserving(tokenizer: Any, tools: list[dict[str, Any]]) -> None:
    """Probe the template with a multi-turn conversation (text turn, tool call, tool result, user reply, reasoning);
    raise TemplateDriftError when any turn rewrites an earlier one, or when the generation prompt is not where the
    assistant's turn starts."""
    from gapforge.envs.protocol import ToolCall

    name = tools[0]["function"]["name"] if tools else "lookup"
    convo = [
        Message.system("probe system"),
        Message.user("first user turn"),
        Message.assistant(
            content="<think>\nreasoning\n</think>\n\nLet me check.",
            tool_calls=[ToolCall(id="c1", name=name, arguments={"x": 1})],
        ),
        Message.tool("c1", '{"ok": true}', name=name),
        Message.assistant(content="<think>\nmore\n</think>\n\nAnything else?"),
        Message.user("second user turn"),
        Message.assistant(content="Done."),
    ]
    for k in range(2, len(convo)):
        if convo[k].role != "assistant":
            continue
        prompt = render(tokenizer, convo[:k], tools, generation_prompt=True)
        full = render(tokenizer, convo[: k + 1], tools, generation_prompt=False)
        if not full.startswith(prompt):
            raise TemplateDriftError(
                f"the chat template is not prefix-preserving: the generation prompt after {k} messages is not a prefix "
                "of the rendering with the assistant turn (the template rewrites history, e.g. drops <think> blocks); "
                "use a template that renders history unchanged"
            )
        nxt = next((j for j in range(k + 1, len(convo)) if convo[j].role == "assistant"), None)
        if nxt is not None:
            env_delta(tokenizer, convo[: k + 1], convo[k + 1 : nxt], tools)


@dataclass
class TokenTrajectory:
    """One rollout as tokens. `completion_ids[i]` came from the sampler iff `env_mask[i] == 1`; `logprobs[i]` is the
    sampler's logprob of it (0.0 on env tokens, which the loss ignores)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)

    def add_sampled(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        self.completion_ids += ids
        self.logprobs += [float(x) for x in logprobs]
        self.env_mask += [1] * len(ids)

    def add_env(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.env_mask += [0] * len(ids)

    @property
    def context_ids(self) -> list[int]:
        """What the model conditions on for its next turn."""
        return self.prompt_ids + self.completion_ids

    def spans(self) -> list[tuple[int, list[int]]]:
        """Maximal runs of equal mask: [(mask, ids), ...] (for inspection and tests)."""
        out: list[tuple[int, list[int]]] = []
        for tok, m in zip(self.completion_ids, self.env_mask):
            if out and out[-1][0] == m:
                out[-1][1].append(tok)
            else:
                out.append((m, [tok]))
        return out
