"""The analysis stage end to end for `gapforge analyze` (the graph's nodes call the same services one node each:
gapforge/stages/analysis.py): split -> discovery -> R labeling passes -> selection; plus what `--show` lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gapforge.agents.analysis.compact import TokenCounter
from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import DiscoveryResult, discover
from gapforge.agents.analysis.errors import AnalysisError
from gapforge.agents.analysis.labeling import LabelPassResult, Progress, label_pass
from gapforge.agents.analysis.selection import SelectionResult, select
from gapforge.agents.analysis.split import TaskSplit, ensure_split


@dataclass(frozen=True)
class AnalysisReport:
    split: TaskSplit
    discovery: DiscoveryResult
    passes: tuple[LabelPassResult, ...]
    selection: SelectionResult

    @property
    def calls_made(self) -> int:
        return self.discovery.calls + sum(p.calls for p in self.passes)

    @property
    def calls_cached(self) -> int:
        return int(self.discovery.cached) + sum(p.cached for p in self.passes)

    @property
    def prompt_tokens(self) -> int:
        return (0 if self.discovery.cached else self.discovery.prompt_tokens) + sum(
            p.prompt_tokens for p in self.passes
        )

    @property
    def completion_tokens(self) -> int:
        return (0 if self.discovery.cached else self.discovery.completion_tokens) + sum(
            p.completion_tokens for p in self.passes
        )


async def analyze_run(
    store: Any,
    chat_model: Any,
    run_id: str,
    *,
    cfg: AnalysisConfig,
    counter: TokenCounter | None = None,
    retry_failed: bool = False,
    on_progress: Progress | None = None,
) -> AnalysisReport:
    """Everything the stage does for a run; what is stored is reused (a full re-run makes 0 calls).
    `on_progress(done, total)` counts episodes over all R passes."""
    import asyncio

    split = await asyncio.to_thread(ensure_split, store, run_id, fraction=cfg.split_fraction, seed=cfg.seed)
    found = await asyncio.to_thread(discover, store, chat_model, run_id, cfg=cfg, counter=counter)
    results: list[LabelPassResult] = []
    offset = [0]

    def progress(done: int, total: int) -> None:
        if on_progress:
            on_progress(offset[0] + done, total * cfg.passes)

    for p in range(cfg.passes):
        result = await label_pass(
            store, chat_model, run_id, p, cfg=cfg, counter=counter, retry_failed=retry_failed, on_progress=progress
        )
        results.append(result)
        offset[0] += result.episodes
    selection = await asyncio.to_thread(select, store, run_id, cfg=cfg)
    return AnalysisReport(split, found, tuple(results), selection)


@dataclass(frozen=True)
class LackingEpisode:
    episode_id: int
    task_id: str
    success: bool
    passes: tuple[int, ...]  # passes that labeled it LACKING
    evidence: str  # from the first such pass


def lacking_episodes(store: Any, run_id: str, capability: str) -> list[LackingEpisode]:
    """The episodes labeled LACKING for `capability` in any pass, with evidence."""
    if store.get_capability(run_id, capability) is None:
        known = ", ".join(c.name for c in store.capabilities(run_id)) or "none yet"
        raise AnalysisError(f"run {run_id!r} has no capability {capability!r}: pick one of {known}")
    by_episode: dict[int, list[Any]] = {}
    for lab in store.labels(run_id, capability=capability):
        if lab.value == "LACKING":
            by_episode.setdefault(lab.episode_id, []).append(lab)
    out = []
    for eid in sorted(by_episode):
        ep = store.get_episode(eid)
        labs = sorted(by_episode[eid], key=lambda lab: lab.pass_index)
        out.append(
            LackingEpisode(eid, ep.task_id, bool(ep.success), tuple(lab.pass_index for lab in labs), labs[0].evidence)
        )
    return out
