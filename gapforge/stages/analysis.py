"""`discover`, `label` (one pass), `select`: the contrastive capability analysis (agents.analysis)."""

from __future__ import annotations

from typing import Any

from gapforge.config import GapforgeConfig
from gapforge.graph.context import (
    CapabilityStats,
    Cost,
    DiscoveryDone,
    LabelPassDone,
    SelectionDone,
    StageFailed,
)
from gapforge.stages.common import StageContext, data_errors, require


def analyst_model(cfg: GapforgeConfig, env: str) -> Any:
    """The analyst chat model: the recorded one for the env when llm.kind=scripted without a file."""
    if cfg.llm.kind == "scripted" and not cfg.llm.scripted_path:
        from gapforge.agents.analysis.recorded import recorded_analyst

        return recorded_analyst(env)
    from gapforge.agents.llm import chat_model_from_config

    return chat_model_from_config(cfg.llm)


class Analysis:
    """The analyst model and token counter are made once per run, on first use. The graph's nodes call `discover`,
    `label`, `select`; `gapforge analyze` calls the steps under them (`discovery`, `label_pass`, `selection`), which
    return the analysis services' full results."""

    def __init__(self, sc: StageContext) -> None:
        self.sc = sc
        self.env: str | None = (
            None  # the env whose analyst to use (default rollouts.env; `gapforge analyze`: the run's episodes')
        )
        self._model: Any = None
        self._counter: Any = None

    def _models(self) -> tuple[Any, Any]:
        require("gapforge.agents.analysis.service", "capability analysis")
        if self._model is None:
            from gapforge.agents.analysis.compact import make_token_counter

            cfg = self.sc.cfg
            self._counter = make_token_counter(
                cfg.analysis.tokenizer, cfg.policy.local_path if cfg.policy.kind == "local" else None
            )
            self._model = analyst_model(cfg, self.env or cfg.rollouts.env)
        return self._model, self._counter

    @property
    def counter(self) -> Any:
        return self._models()[1]

    async def discovery(self, run_id: str) -> tuple[Any, Any]:
        """(the task split, the discovered dictionary): agents.analysis split.ensure_split then discovery.discover."""
        model, counter = self._models()
        from gapforge.agents.analysis.discovery import discover
        from gapforge.agents.analysis.split import ensure_split

        sc, acfg = self.sc, self.sc.cfg.analysis
        split = await sc.in_thread(ensure_split, sc.store, run_id, fraction=acfg.split_fraction, seed=acfg.seed)
        found = await sc.in_thread(discover, sc.store, model, run_id, cfg=acfg, counter=counter)
        return split, found

    async def discover(self, run_id: str) -> DiscoveryDone:
        _split, found = await self.discovery(run_id)
        cost = Cost(0, 0, 0) if found.cached else Cost(found.calls, found.prompt_tokens, found.completion_tokens)
        return DiscoveryDone([c.name for c in found.capabilities], cost)

    async def label_pass(
        self, run_id: str, pass_index: int, *, retry_failed: bool = False, on_progress: Any = None
    ) -> Any:
        """One labeling pass (agents.analysis.labeling.label_pass); its data errors become StageFailed."""
        model, counter = self._models()
        from gapforge.agents.analysis.labeling import label_pass

        try:
            return await label_pass(
                self.sc.store,
                model,
                run_id,
                pass_index,
                cfg=self.sc.cfg.analysis,
                counter=counter,
                retry_failed=retry_failed,
                on_progress=on_progress,
            )
        except data_errors() as e:
            raise StageFailed(str(e).splitlines()[0]) from None

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        def progress(done: int, total: int) -> None:
            if done == total or done % max(1, total // 4) == 0:
                self.sc.progress("label", f"pass {pass_index}: {done}/{total} episodes")

        res = await self.label_pass(run_id, pass_index, on_progress=progress)
        return LabelPassDone(
            pass_index, res.labeled, res.failed, Cost(res.calls, res.prompt_tokens, res.completion_tokens)
        )

    async def selection(self, run_id: str) -> Any:
        """The statistics and the retained capabilities (agents.analysis.selection.select)."""
        self._models()
        from gapforge.agents.analysis.selection import select

        return await self.sc.in_thread(select, self.sc.store, run_id, cfg=self.sc.cfg.analysis)

    async def select(self, run_id: str) -> SelectionDone:
        sel = await self.selection(run_id)
        stats = {
            s.capability: CapabilityStats(
                s.gap,
                s.coverage,
                s.kept_passes,
                s.retained,
                s.verdict if s.verdict in ("deferred", "excluded") else None,
            )
            for s in sel.statistics
        }
        return SelectionDone(list(sel.retained), stats)
