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
    """The analyst model and token counter are made once per run, on first use (`models()`). The graph's nodes call
    `discover`, `label`, `select`, one checkpointed node each; `gapforge analyze` runs the same services in one call
    (agents.analysis.service.analyze_run) with these models."""

    def __init__(self, sc: StageContext) -> None:
        self.sc = sc
        self.env: str | None = (
            None  # the env whose analyst to use (default rollouts.env; `gapforge analyze`: the run's episodes')
        )
        self._model: Any = None
        self._counter: Any = None

    def models(self) -> tuple[Any, Any]:
        require("gapforge.agents.analysis.service", "capability analysis")
        if self._model is None:
            from gapforge.agents.analysis.compact import make_token_counter

            cfg = self.sc.cfg
            self._counter = make_token_counter(
                cfg.analysis.tokenizer, cfg.policy.local_path if cfg.policy.kind == "local" else None
            )
            self._model = analyst_model(cfg, self.env or cfg.rollouts.env)
        return self._model, self._counter

    async def discover(self, run_id: str) -> DiscoveryDone:
        """The task split (agents.analysis.split.ensure_split), then the capability dictionary (discovery.discover)."""
        model, counter = self.models()
        from gapforge.agents.analysis.discovery import discover
        from gapforge.agents.analysis.split import ensure_split

        sc, acfg = self.sc, self.sc.cfg.analysis
        await sc.in_thread(ensure_split, sc.store, run_id, fraction=acfg.split_fraction, seed=acfg.seed)
        found = await sc.in_thread(discover, sc.store, model, run_id, cfg=acfg, counter=counter)
        cost = Cost(0, 0, 0) if found.cached else Cost(found.calls, found.prompt_tokens, found.completion_tokens)
        return DiscoveryDone([c.name for c in found.capabilities], cost)

    async def label(self, run_id: str, pass_index: int) -> LabelPassDone:
        """One labeling pass (agents.analysis.labeling.label_pass); its data errors become StageFailed."""
        model, counter = self.models()
        from gapforge.agents.analysis.labeling import label_pass

        def progress(done: int, total: int) -> None:
            if done == total or done % max(1, total // 4) == 0:
                self.sc.progress("label", f"pass {pass_index}: {done}/{total} episodes")

        try:
            res = await label_pass(
                self.sc.store,
                model,
                run_id,
                pass_index,
                cfg=self.sc.cfg.analysis,
                counter=counter,
                on_progress=progress,
            )
        except data_errors() as e:
            raise StageFailed(str(e).splitlines()[0]) from None
        return LabelPassDone(
            pass_index, res.labeled, res.failed, Cost(res.calls, res.prompt_tokens, res.completion_tokens)
        )

    async def select(self, run_id: str) -> SelectionDone:
        """The statistics and the retained capabilities (agents.analysis.selection.select)."""
        self.models()
        from gapforge.agents.analysis.selection import select

        sel = await self.sc.in_thread(select, self.sc.store, run_id, cfg=self.sc.cfg.analysis)
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
