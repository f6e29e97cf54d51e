"""The generator's inputs, gathered from the store and the target env. Only analysis-split episodes reach the
generator: with a stored split, a held-out task's episode is never shown, even if labeled LACKING (the guard at the
generator's own door). `split_texts` (the openings of both splits) is what the self-test's contamination check
compares the generated env's user lines with. The prompt names the target by its own facts: name, tool schemas, policy
document (the shown episodes' system message, else the env's first task's) and one stored result per tool.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from statistics import mean
from typing import TYPE_CHECKING, Any

from gapforge.agents.analysis.compact import system_prompt
from gapforge.agents.analysis.split import split_openings
from gapforge.agents.analysis.target import called_tools
from gapforge.envs.registry import make_env
from gapforge.sandbox.checks.contamination import SplitTexts

if TYPE_CHECKING:
    from gapforge.store import Store

RESULT_CHARS = 600  # one stored result per tool, cut here


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
    result_formats: dict[str, str] = field(default_factory=dict)  # tool -> one stored result (analysis split)
    split_texts: SplitTexts | None = None  # the target's openings by split, for check `contamination`

    def statistics(self) -> str:
        if self.gap is None and self.coverage is None:
            return "not computed"
        gap = "undefined" if self.gap is None else f"{self.gap:.2f}"
        cov = "undefined" if self.coverage is None else f"{self.coverage:.2f}"
        return f"gap ER- - ER+ = {gap}, coverage among failures = {cov} (mean over {self.passes} labeling pass(es))"

    def result_formats_text(self) -> str:
        return (
            "\n".join(f"- {name}: {text}" for name, text in self.result_formats.items())
            or "(no successful tool result in these episodes)"
        )


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


def compact_episode(messages: list[dict[str, Any]], evidence: list[str], max_chars: int) -> str:
    """One line per message (system prompt dropped, long contents cut), then the labels' evidence."""
    lines: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant" and m.get("tool_calls"):
            calls = ", ".join(
                f"{c.get('name')}({json.dumps(c.get('arguments'), sort_keys=True)})" for c in m["tool_calls"]
            )
            lines.append(f"assistant -> {calls}")
        else:
            text = " ".join(str(m.get("content") or "").split())
            lines.append(f"{role}: {text[:300]}{'...' if len(text) > 300 else ''}")
    body = "\n".join(lines)
    if len(body) > max_chars:
        body = body[: max_chars // 2] + "\n[...]\n" + body[-max_chars // 2 :]
    why = "\n".join(f"- {e}" for e in dict.fromkeys(evidence) if e) or "- (no evidence recorded)"
    return f"{body}\nWhy the analyst labeled it LACKING:\n{why}"


def result_examples(
    messages_of: list[list[dict[str, Any]]], tools: list[str], max_chars: int = RESULT_CHARS
) -> dict[str, str]:
    """One successful result per tool (the first in the episodes given; tool errors skipped), cut to max_chars."""
    out: dict[str, str] = {}
    for messages in messages_of:
        names = {c.get("id"): c.get("name") for m in messages for c in (m.get("tool_calls") or [])}
        for m in messages:
            name = m.get("name") or names.get(m.get("tool_call_id"))
            text = str(m.get("content") or "")
            if m.get("role") == "tool" and name in tools and name not in out and text and not text.startswith("Error"):
                out[name] = (
                    text if len(text) <= max_chars else text[:max_chars] + f"...[cut {len(text) - max_chars} chars]"
                )
    return {t: out[t] for t in tools if t in out}


def gather_context(
    store: Store,
    run_id: str,
    capability: str,
    *,
    n_episodes: int,
    episode_chars: int,
    target: TargetFacts | None = None,
    unseen_env: str | None = None,
) -> GeneratorContext:
    """The capability, its statistics, its most often LACKING failed analysis-split episodes, the target's facts and
    the run's openings by split (`unseen_env`'s held out too)."""
    cap = store.get_capability(run_id, capability)
    if cap is None:
        raise LookupError(f"capability {capability!r} is not stored in run {run_id!r}: run the analysis first")
    split = store.get_split(run_id)
    shown_tasks = set(split.analysis_tasks) if split is not None else None
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
        if ep.success or (shown_tasks is not None and ep.task_id not in shown_tasks):
            continue  # successes are not failures; held-out tasks never reach the generator
        chosen.append(ep)
        if len(chosen) == n_episodes:
            break
    env_name = target.name if target else (Counter(e.env for e in chosen).most_common(1)[0][0] if chosen else None)
    if env_name is None:
        raise LookupError(
            f"capability {capability!r} of run {run_id!r} has no failed analysis-split episode labeled LACKING: "
            "nothing to synthesize from"
        )
    if target is None:  # the policy document as the shown episodes' system message says it (else the first task's)
        found = target_facts(env_name)
        stored = next((policy for e in chosen if (policy := system_prompt(e))), "")
        target = TargetFacts(found.name, found.tools, stored or found.policy)
    facts = target
    texts = {e.id: compact_episode(e.messages, evidence[e.id], episode_chars) for e in chosen}
    episodes = [LackingEpisode(e.id, e.task_id, texts[e.id], called_tools(e.messages)) for e in chosen]
    used = {n for e in episodes for n in e.tools_used}
    tools = [t for t in facts.tools if t["function"]["name"] in used] or facts.tools
    formats = result_examples([e.messages for e in chosen], [t["function"]["name"] for t in tools])
    gap, coverage = mean(gaps) if gaps else None, mean(s.coverage for s in stats) if stats else None
    openings = split_openings(store, run_id, env_name, unseen_env=unseen_env)
    return GeneratorContext(
        capability, cap.definition, gap, coverage, len(stats), episodes, facts, tools, formats, openings
    )
