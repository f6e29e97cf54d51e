"""The generator's inputs, gathered from the store and the target env.

`compact_episode` is a minimal rendering of one failed episode for the prompt. The analysis
stage (agents/analysis) writes the project's episode compactor; swap it in here (one call
site, `gather_context`) when it lands.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Protocol

from envs.registry import make_env


@dataclass(frozen=True)
class TargetFacts:
    """What the generator and the checks need of the target env."""

    name: str
    tools: list[dict[str, Any]]
    policy: str


@dataclass(frozen=True)
class LackingEpisode:
    episode_id: int
    task_id: str
    text: str  # compacted
    tools_used: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GeneratorContext:
    capability: str
    definition: str
    gap: float | None
    coverage: float | None
    passes: int
    episodes: list[LackingEpisode]
    target: TargetFacts
    tools_in_episodes: list[dict[str, Any]]

    def statistics(self) -> str:
        if self.gap is None and self.coverage is None:
            return "not computed"
        gap = "undefined" if self.gap is None else f"{self.gap:.2f}"
        cov = "undefined" if self.coverage is None else f"{self.coverage:.2f}"
        return f"gap ER- - ER+ = {gap}, coverage among failures = {cov} (mean over {self.passes} labeling pass(es))"


class StoreReader(Protocol):  # the Store methods used here
    def get_capability(self, run_id: str, name: str) -> Any: ...
    def capability_stats(self, run_id: str, capability: str | None = None) -> list[Any]: ...
    def labels(self, run_id: str, pass_index: int | None = None, capability: str | None = None) -> list[Any]: ...
    def get_episode(self, episode_id: int) -> Any: ...
    def episodes(self, run_id: str, env: str | None = None, success: bool | None = None) -> list[Any]: ...


def target_facts(name: str) -> TargetFacts:
    """Tools and policy (the system message of its first task) of a registered target env."""
    env = make_env(name)
    try:
        tools = env.tools()
        first = env.reset(env.task_ids()[0])  # type: ignore[attr-defined]
        policy = next((m.content or "" for m in first if m.role == "system"), "")
    finally:
        env.close()
    return TargetFacts(name, tools, policy)


def _tools_used(messages: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(c.get("name") for m in messages for c in (m.get("tool_calls") or []) if c.get("name")))


def compact_episode(messages: list[dict[str, Any]], evidence: list[str], max_chars: int) -> str:
    """One line per message (system prompt dropped, long contents cut), then the labels' evidence."""
    lines: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant" and m.get("tool_calls"):
            calls = ", ".join(f"{c.get('name')}({json.dumps(c.get('arguments'), sort_keys=True)})" for c in m["tool_calls"])
            lines.append(f"assistant -> {calls}")
        else:
            text = " ".join(str(m.get("content") or "").split())
            lines.append(f"{role}: {text[:300]}{'...' if len(text) > 300 else ''}")
    body = "\n".join(lines)
    if len(body) > max_chars:
        body = body[: max_chars // 2] + "\n[...]\n" + body[-max_chars // 2 :]
    why = "\n".join(f"- {e}" for e in dict.fromkeys(evidence) if e) or "- (no evidence recorded)"
    return f"{body}\nWhy the analyst labeled it LACKING:\n{why}"


def gather_context(store: StoreReader, run_id: str, capability: str, *, n_episodes: int, episode_chars: int,
                   target: TargetFacts | None = None) -> GeneratorContext:
    """The capability, its statistics, its most often LACKING failed episodes, and the target's facts."""
    cap = store.get_capability(run_id, capability)
    if cap is None:
        raise LookupError(f"capability {capability!r} is not stored in run {run_id!r}: run the analysis first")
    stats = store.capability_stats(run_id, capability)
    gaps = [s.gap for s in stats if s.gap is not None]
    lacking = [lab for lab in store.labels(run_id, capability=capability) if lab.value == "LACKING"]
    votes = Counter(lab.episode_id for lab in lacking)
    evidence: dict[int, list[str]] = {}
    for lab in lacking:
        evidence.setdefault(lab.episode_id, []).append(lab.evidence)
    chosen = []
    for episode_id, _ in sorted(votes.items(), key=lambda kv: (-kv[1], kv[0])):
        ep = store.get_episode(episode_id)
        if ep.success:
            continue
        chosen.append(ep)
        if len(chosen) == n_episodes:
            break
    env_name = target.name if target else (Counter(e.env for e in chosen).most_common(1)[0][0] if chosen else None)
    if env_name is None:
        raise LookupError(f"capability {capability!r} of run {run_id!r} has no failed episode labeled LACKING: nothing to synthesize from")
    facts = target or target_facts(env_name)
    episodes = [LackingEpisode(e.id, e.task_id, compact_episode(e.messages, evidence[e.id], episode_chars), _tools_used(e.messages))
                for e in chosen]
    used = {n for e in episodes for n in e.tools_used}
    tools = [t for t in facts.tools if t["function"]["name"] in used] or facts.tools
    return GeneratorContext(capability, cap.definition, mean(gaps) if gaps else None,
                            mean(s.coverage for s in stats) if stats else None, len(stats), episodes, facts, tools)
