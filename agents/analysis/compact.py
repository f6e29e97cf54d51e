"""Trajectory compaction: an episode rendered for the analyst within a token budget, deterministically.

Every message keeps its index in the stored episode (`[i]`), so a label's evidence can cite it. Long values are cut
with a visible marker; if the episode still exceeds the budget the cut is tightened, then middle messages are dropped
with a marker (first and last kept). The system prompt (the env's policy, the same in every episode) is not repeated:
the prompts show it once. Token counts come from a real tokenizer when one is configured (`tiktoken:ENC`, a
tokenizer.json / HF model dir such as the policy's); `bytes` is a labelled estimate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gapforge.agents.errors import AnalysisError


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class ByteEstimate:
    """ceil(UTF-8 bytes / 4): an estimate, named as such wherever counts are shown."""

    name: str = "estimate (utf-8 bytes / 4)"

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / 4)


class _Encoding:
    def __init__(self, name: str, encode: Any) -> None:
        self.name, self._encode = name, encode

    def count(self, text: str) -> int:
        return len(self._encode(text))


def make_token_counter(spec: str = "auto", policy_tokenizer: str | None = None) -> TokenCounter:
    """`auto` = the policy's tokenizer when given, else the byte estimate; `tiktoken:ENC`; a path; `bytes`."""
    if spec == "auto":
        return make_token_counter(policy_tokenizer, None) if policy_tokenizer else ByteEstimate()
    if spec == "bytes":
        return ByteEstimate()
    if spec.startswith("tiktoken:"):
        enc_name = spec.partition(":")[2]
        try:
            import tiktoken

            enc = tiktoken.get_encoding(enc_name)
        except Exception as e:  # noqa: BLE001 - import error or no cached encoding (offline): one line
            raise AnalysisError(
                f"analysis.tokenizer={spec}: cannot load ({type(e).__name__}: {e}); use a tokenizer path or 'bytes'"
            ) from None
        return _Encoding(spec, lambda t: enc.encode(t, disallowed_special=()))
    path = Path(spec)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise AnalysisError(
            f"analysis.tokenizer={spec}: no tokenizer.json there; use auto, bytes, tiktoken:ENC or a tokenizer path"
        )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(file))
    return _Encoding(f"tokenizer {file}", lambda t: tok.encode(t, add_special_tokens=False).ids)


@dataclass(frozen=True)
class CompactEpisode:
    episode_id: int
    text: str
    tokens: int
    n_messages: int
    cut_values: int  # values shortened
    dropped_messages: int


def _cut(value: str, limit: int) -> tuple[str, bool]:
    value = " ".join(value.split()) if "\n" in value else value
    if len(value) <= limit:
        return value, False
    return f"{value[:limit]}…[cut {len(value) - limit} chars]", True


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _lines(messages: list[dict[str, Any]], limit: int) -> tuple[list[str], int]:
    out, cuts = [], 0

    def cut(value: str) -> str:
        nonlocal cuts
        text, was_cut = _cut(value, limit)
        cuts += was_cut
        return text

    for i, m in enumerate(messages):
        role, content = m.get("role", "?"), m.get("content") or ""
        if role == "system":
            out.append(f"[{i}] system: (the policy shown above, {len(content)} chars)")
        elif role == "tool":
            out.append(f"[{i}] tool {m.get('name') or ''}: {cut(content)}".replace("tool :", "tool:"))
        else:
            parts = [cut(content)] if content else []
            parts += [
                f"CALL {tc.get('name')}({cut(_args(tc.get('arguments', {})))})" for tc in m.get("tool_calls") or []
            ]
            out.append(f"[{i}] {role}: " + (" | ".join(parts) if parts else "(empty)"))
    return out, cuts


def _header(ep: Any) -> list[str]:
    outcome = "SUCCESS" if ep.success else "FAILURE"
    head = [
        f"### episode {ep.id}",
        f"task: {ep.task_id} | family: {ep.task_family or '-'} | outcome: {outcome} (reward {ep.reward:.2f}) | termination: {ep.termination}",
    ]
    comps = " ".join(
        f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in sorted((ep.components or {}).items())
    )
    info = getattr(ep, "score_info", None) or {}
    missing = info.get("missing_info") if isinstance(info, dict) else None
    extra = f" | missing info: {', '.join(map(str, missing))}" if missing else ""
    if comps or extra:
        head.append(f"score: {comps or '-'}{extra}")
    if ep.error:
        head.append(f"error: {_cut(ep.error, 200)[0]}")
    return head


EPISODE_BUDGET_TOKENS = 3000  # tokens of one compacted episode in a discovery or labeling prompt
MAX_VALUE_CHARS = 400  # longer tool arguments, results and turns are cut


def compact_episode(
    ep: Any,
    counter: TokenCounter,
    *,
    budget_tokens: int = EPISODE_BUDGET_TOKENS,
    max_value_chars: int = MAX_VALUE_CHARS,
) -> CompactEpisode:
    """Render an episode (a store EpisodeRow or anything with its fields) within `budget_tokens`."""
    messages = list(ep.messages)
    head = _header(ep)
    limit = max_value_chars
    while True:
        lines, cuts = _lines(messages, limit)
        text = "\n".join([*head, f"messages ({len(messages)}):", *lines])
        tokens = counter.count(text)
        if tokens <= budget_tokens or limit <= 40:
            break
        limit = max(40, limit // 2)
    dropped = 0
    while tokens > budget_tokens and len(lines) - dropped > 2:
        dropped += 1
        mid = (len(lines) - dropped) // 2
        keep = lines[:mid] + [f"[… {dropped} messages omitted to fit the budget …]"] + lines[mid + dropped :]
        text = "\n".join([*head, f"messages ({len(messages)}):", *keep])
        tokens = counter.count(text)
    return CompactEpisode(int(ep.id), text, tokens, len(messages), cuts, dropped)


def system_prompt(ep: Any) -> str:
    """The episode's system prompt (the env's policy), shown once in a prompt's fixed part."""
    for m in ep.messages:
        if m.get("role") == "system":
            return m.get("content") or ""
    return ""
