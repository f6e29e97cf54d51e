"""`discover`, `label` (one pass), `select`: the contrastive capability analysis (agents.analysis). Each graph method
wraps one step (`run_discovery`, `run_label_pass`, `run_selection`: their full results, which `gapforge analyze` calls
in turn and renders), its data errors (AnalysisError) recorded as StageFailed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gapforge.config import GapforgeConfig
from gapforge.graph.context import (
    CapabilityStats,
    Cost,
    DiscoveryDone,
    LabelPassDone,
    SelectionDone,
    StageFailed,
)

if TYPE_CHECKING:
    from gapforge.agents.analysis.discovery import DiscoveryResult
    from gapforge.agents.analysis.labeling import LabelPassResult
    from gapforge.agents.analysis.selection import SelectionResult
    from gapforge.agents.analysis.split import TaskSplit
    from gapforge.stages import RunStages


def analyst_model(cfg: GapforgeConfig, env: str) -> Any:
    """The analyst chat model: the recorded one for the env when llm.kind=scripted without a file."""
    if cfg.llm.kind == "scripted" and not cfg.llm.scripted_path:
        from gapforge.agents.analysis.recorded import recorded_analyst

        return recorded_analyst(env)
    from gapforge.agents.llm import chat_model_from_config

    return chat_model_from_config(cfg.llm)


def models(sc: RunStages) -> tuple[Any, Any]:
    """(analyst chat model, token counter), made once per run on first use; their errors are the input's (exit 2)."""
    if sc.analyst is None:
        from gapforge.agents.analysis.compact import make_token_counter

        cfg = sc.cfg
        counter = make_token_counter(
            cfg.analysis.tokenizer, cfg.policy.local_path if cfg.policy.kind == "local" else None
        )
        sc.analyst = (analyst_model(cfg, sc.analysis_env or cfg.rollouts.env), counter)
    return sc.analyst


@contextlib.contextmanager
def _data_failure() -> Iterator[None]:
    """AnalysisError: this run's data cannot give a result -> StageFailed (recorded, not retried)."""
    from gapforge.agents.errors import AnalysisError

    try:
        yield
    except AnalysisError as e:
        raise StageFailed(str(e).splitlines()[0]) from None


async def run_discovery(sc: RunStages, run_id: str) -> tuple[TaskSplit, DiscoveryResult]:
    """The task split (agents.analysis.split.ensure_split), then the capability dictionary (discovery.discover)."""
    from gapforge.agents.analysis.discovery import discover
    from gapforge.agents.analysis.split import ensure_split

    model, counter = models(sc)
    acfg = sc.cfg.analysis
    split = await asyncio.to_thread(ensure_split, sc.store, run_id, fraction=acfg.split_fraction, seed=acfg.seed)
    found = await asyncio.to_thread(discover, sc.store, model, run_id, cfg=acfg, counter=counter)
    return split, found


async def run_label_pass(
    sc: RunStages,
    run_id: str,
    pass_index: int,
    *,
    retry_failed: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> LabelPassResult:
    """One labeling pass (agents.analysis.labeling.label_pass); `retry_failed`: re-ask episodes whose labels failed."""
    from gapforge.agents.analysis.labeling import label_pass

    model, counter = models(sc)
    return await label_pass(
        sc.store,
        model,
        run_id,
        pass_index,
        cfg=sc.cfg.analysis,
        counter=counter,
        retry_failed=retry_failed,
        on_progress=on_progress,
    )


async def run_selection(sc: RunStages, run_id: str) -> SelectionResult:
    """The statistics and the retained capabilities (agents.analysis.selection.select)."""
    from gapforge.agents.analysis.selection import select

    models(sc)
    return await asyncio.to_thread(select, sc.store, run_id, cfg=sc.cfg.analysis)


async def discover(sc: RunStages, run_id: str) -> DiscoveryDone:
    models(sc)
    with _data_failure():
        _split, found = await run_discovery(sc, run_id)
    cost = Cost(0, 0, 0) if found.cached else Cost(found.calls, found.prompt_tokens, found.completion_tokens)
    return DiscoveryDone([c.name for c in found.capabilities], cost)


async def label(sc: RunStages, run_id: str, pass_index: int) -> LabelPassDone:
    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // 4) == 0:
            sc.progress("label", f"pass {pass_index}: {done}/{total} episodes")

    models(sc)
    with _data_failure():
        res = await run_label_pass(sc, run_id, pass_index, on_progress=progress)
    return LabelPassDone(pass_index, res.labeled, res.failed, Cost(res.calls, res.prompt_tokens, res.completion_tokens))


async def select(sc: RunStages, run_id: str) -> SelectionDone:
    models(sc)
    with _data_failure():
        sel = await run_selection(sc, run_id)
    stats = {
        s.capability: CapabilityStats(
            s.gap, s.coverage, s.kept_passes, s.retained, s.verdict if s.verdict in ("deferred", "excluded") else None
        )
        for s in sel.statistics
    }
    return SelectionDone(list(sel.retained), stats)
