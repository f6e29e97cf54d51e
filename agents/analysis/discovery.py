"""Discovery: the analyst reads a stratified sample of failed and successful analysis-split episodes (within a token
budget; the target named by its own facts, agents/analysis/target.py) and proposes the capability dictionary in one
structured call (prompts/analyst_discover.md). The answer is validated beyond types (schemas.dictionary_problems); a
violation is re-asked once, then the stage fails with StructuredOutputError. A stored discovery is returned without a
call.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage

from gapforge.agents.analysis.compact import ByteEstimate, TokenCounter, compact_episode, system_prompt
from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.schemas import CapabilityDictionary, dictionary_hash, discovery_schema
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.analysis.target import target_brief
from gapforge.agents.analysis.usage import UsageCounter
from gapforge.agents.errors import AnalysisError
from gapforge.agents.llm import structured_call
from gapforge.prompts import load_prompt

if TYPE_CHECKING:
    from gapforge.store import Store

PROMPT_FILE = "analyst_discover.md"


@dataclass(frozen=True)
class CapabilityEntry:
    name: str
    definition: str
    example_episode_ids: tuple[int, ...]


@dataclass(frozen=True)
class DiscoveryResult:
    run_id: str
    capabilities: tuple[CapabilityEntry, ...]
    dictionary_hash: str
    prompt: str  # name@version
    sample_episode_ids: tuple[int, ...]
    cached: bool  # True: read from the store, no call made
    calls: int
    prompt_tokens: int
    completion_tokens: int
    token_counter: str


def stratified(episodes: list[Any], n: int, rng: random.Random) -> list[Any]:
    """Up to n episodes, round-robin over task families (each family's order shuffled)."""
    by_family: dict[str, list[Any]] = defaultdict(list)
    for e in sorted(episodes, key=lambda e: e.id):
        by_family[e.task_family or "-"].append(e)
    queues = [by_family[f] for f in sorted(by_family)]
    for q in queues:
        rng.shuffle(q)
    out: list[Any] = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


def _stored(store: Store, run_id: str, row: Any) -> DiscoveryResult:
    caps = tuple(
        CapabilityEntry(c.name, c.definition, tuple(c.example_episode_ids)) for c in store.capabilities(run_id)
    )
    prompt, d = f"{row.prompt_name}@{row.prompt_version}", row.details
    tokens = int(d.get("prompt_tokens", 0)), int(d.get("completion_tokens", 0)), str(d.get("token_counter", ""))
    return DiscoveryResult(run_id, caps, row.dictionary_hash, prompt, tuple(row.sample_episode_ids), True, 0, *tokens)


def discover(
    store: Store, chat_model: Any, run_id: str, *, cfg: AnalysisConfig, counter: TokenCounter | None = None
) -> DiscoveryResult:
    """Propose and store the run's capability dictionary (or return the stored one: 0 calls)."""
    stored = store.get_discovery(run_id)
    if stored is not None:
        return _stored(store, run_id, stored)
    counter = counter or ByteEstimate()
    summaries = analysis_episodes(store, run_id, fraction=cfg.split_fraction, seed=cfg.seed)
    failed = [e for e in summaries if not e.success]
    if not failed:
        raise AnalysisError(
            f"run {run_id!r} has no failed episode in its analysis split: nothing to contrast; collect more rollouts"
        )
    rng = random.Random(f"discover:{cfg.seed}")
    picked = stratified(failed, cfg.discovery_failed, rng) + stratified(
        [e for e in summaries if e.success], cfg.discovery_success, rng
    )
    shown, used, policy = [], 0, ""
    for summary in picked:
        ep = store.get_episode(summary.id)
        policy = policy or system_prompt(ep)
        comp = compact_episode(ep, counter)
        if used + comp.tokens > cfg.discovery_budget_tokens:
            continue  # keep trying smaller ones: the budget is a ceiling, not a target
        shown.append((ep, comp))
        used += comp.tokens
    if not any(not ep.success for ep, _ in shown):
        raise AnalysisError(
            f"no failed episode fits analysis.discovery_budget_tokens={cfg.discovery_budget_tokens}: raise it"
        )
    prompt = load_prompt(PROMPT_FILE)
    target = target_brief(shown[0][0].env, (ep for ep, _ in shown))
    text = prompt.body.format(
        target=target.name,
        tool_names=target.tools_line(),
        min_capabilities=cfg.min_capabilities,
        max_capabilities=cfg.max_capabilities,
        policy=policy,
        n_failed=sum(not ep.success for ep, _ in shown),
        n_success=sum(bool(ep.success) for ep, _ in shown),
        episodes="\n\n".join(comp.text for _, comp in shown),
    )
    ids = frozenset(int(ep.id) for ep, _ in shown)
    usage = UsageCounter()
    schema = discovery_schema(ids, cfg.min_capabilities, cfg.max_capabilities)
    answer: CapabilityDictionary = structured_call(
        chat_model, [HumanMessage(content=text)], schema, prompt_name=prompt.name, config={"callbacks": [usage]}
    )  # type: ignore[assignment]
    caps = tuple(
        CapabilityEntry(c.name, c.definition.strip(), tuple(c.example_episode_ids)) for c in answer.capabilities
    )
    dhash = dictionary_hash([(c.name, c.definition) for c in caps])
    origin = {"prompt_name": prompt.name, "prompt_version": prompt.version}
    for c in caps:
        store.put_capability(
            run_id, c.name, definition=c.definition, example_episode_ids=c.example_episode_ids, **origin
        )
    p_tokens = usage.prompt_tokens or counter.count(text) * usage.calls
    c_tokens = usage.completion_tokens or counter.count(answer.model_dump_json())
    details = {
        "calls": usage.calls,
        "prompt_tokens": p_tokens,
        "completion_tokens": c_tokens,
        "token_counter": counter.name,
    }
    details |= {"episode_tokens": used, "shown_failed": sum(not ep.success for ep, _ in shown)}
    store.put_discovery(run_id, dictionary_hash=dhash, sample_episode_ids=sorted(ids), details=details, **origin)
    return DiscoveryResult(
        run_id, caps, dhash, prompt.id, tuple(sorted(ids)), False, usage.calls, p_tokens, c_tokens, counter.name
    )


def current_dictionary(store: Store, run_id: str) -> tuple[list[tuple[str, str]], str]:
    """The stored dictionary [(name, definition)] and its hash; AnalysisError before discovery."""
    caps = [(c.name, c.definition) for c in store.capabilities(run_id)]
    if not caps:
        raise AnalysisError(
            f"run {run_id!r} has no capability dictionary yet: run discovery first (gapforge analyze {run_id})"
        )
    return caps, dictionary_hash(caps)
