"""GEPA (the `gepa` package) as the prompt-optimisation baseline: the base policy's system prompt optimised by
reflective prompt evolution on the analysis split, at TRACE's rollout budget, then evaluated like any policy.

- The candidate has one component, `system_prompt`: the agent's instructions appended to the env's system message (the
  env's own policy document stays first: it is the target's rules). The seed is the base with the run's capability
  descriptions (prompts/capability_hints.md, the `capability_hints` policy), so GEPA starts where the unoptimised
  baseline is.
- `EpisodeAdapter` is gepa's `GEPAAdapter`: `evaluate` plays each analysis-split task once (sample 0: every candidate
  meets the same episode seeds) with the base under the candidate (`PromptedPolicy`) through
  `agents.rollouts.play_episode`, on the caller's event loop; score = the env's reward; every episode played is one
  metric call. `make_reflective_dataset` gives each episode's outcome, score, compacted trajectory
  (agents/analysis/compact.py) and the env's feedback (termination, reward components, missing information).
- The reflection LM is the `llm` role (agents/prompt_opt.py); budget: `evaluation.gepa_max_metric_calls`, default
  TRACE's training rollouts (`gepa_budget`). GEPA's own stopper checks only between iterations, so `optimize_prompt`
  stops before an iteration that could pass the budget (2 minibatches + one full evaluation), and the adapter refuses
  an episode past it: the spend never exceeds the budget.
- The result is stored with the run as the evaluations row `gepa_prompt` (`GepaRecord`) and evaluated as `gepa`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from gapforge.agents.analysis.compact import ByteEstimate, compact_episode
from gapforge.agents.config import episode_limit_s
from gapforge.agents.episode import EpisodeRecord
from gapforge.agents.errors import IncompleteStage
from gapforge.agents.prompt_opt import GepaConfigError, ReflectionLM, reflection_template
from gapforge.agents.prompted_policy import PromptedPolicy, hints_text
from gapforge.agents.rollouts import play_episode
from gapforge.envs.protocol import PolicyModel, TargetEnvironment
from gapforge.evaluation.comparisons import Comparison

if TYPE_CHECKING:
    from gapforge.evaluation.comparisons import Evaluation
    from gapforge.store import Store

GEPA = "gepa"
GEPA_MINIBATCH = 3  # analysis tasks per GEPA reflection step
GEPA_ROW = "gepa_prompt"
COMPONENT = "system_prompt"


class GepaRecord(BaseModel):
    """The optimisation's result, stored with the run (evaluations row `gepa_prompt`)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str  # the optimised `system_prompt` component
    seed_prompt: str
    prompt_id: str  # gepa@<sha256 of prompt, 12 hex>
    metric_calls: int  # episodes GEPA played
    max_metric_calls: int
    tasks: list[str]  # the analysis-split tasks it played
    candidates: int
    seed_score: float  # mean reward of the seed over `tasks`
    best_score: float  # mean reward of `prompt` over `tasks` (what GEPA selected on; not held out)
    reflection_prompt: str  # prompt id of prompts/gepa_reflection.md
    reflection_calls: int
    gepa_version: str


def save_gepa(store: Store, run_id: str, record: GepaRecord) -> None:
    store.put_evaluation(run_id, GEPA_ROW, policy=GEPA, metrics=record.model_dump(mode="json"))


def load_gepa(store: Store, run_id: str) -> GepaRecord | None:
    row = store.get_evaluation(run_id, GEPA_ROW)
    return None if row is None else GepaRecord.model_validate(row.metrics)


def gepa_policy(base: PolicyModel, record: GepaRecord) -> PromptedPolicy:
    return PromptedPolicy(base, record.prompt, name=GEPA, prompt_id=record.prompt_id)


def gepa_budget(cfg: Any, n_adapters: int) -> int:
    """`evaluation.gepa_max_metric_calls`, else TRACE's training rollouts over `n_adapters` adapters."""
    from gapforge.training.budget import training_rollout_budget

    return cfg.evaluation.gepa_max_metric_calls or training_rollout_budget(cfg, n_adapters)


def gepa_label(record: GepaRecord | None) -> str:
    calls = f"{record.metric_calls} metric calls" if record is not None else "metric calls not stored"
    return f"GEPA (prompt optimisation, {calls})"


def feedback(ep: EpisodeRecord) -> str:
    """What the env said about the episode: the outcome, how it ended, the reward's parts and missing information."""
    parts = [f"{'passed' if ep.success else 'failed'} with reward {ep.reward:.2f}; ended by {ep.termination}"]
    if ep.components:
        parts.append("reward components: " + ", ".join(f"{k}={v:g}" for k, v in sorted(ep.components.items())))
    missing = ep.score_info.get("missing_info")
    if missing:
        parts.append("missing: " + ", ".join(map(str, missing)))
    if ep.error:
        parts.append(f"error: {ep.error[:300]}")
    return "; ".join(parts)


class _EpisodeView:
    """An EpisodeRecord in the shape compact_episode reads (a store row's fields)."""

    def __init__(self, ep: EpisodeRecord, family: str) -> None:
        self.id, self.task_id, self.task_family = 0, str(ep.task), family
        self.messages = [m.model_dump(mode="json") for m in ep.messages]
        self.success, self.reward, self.termination = ep.success, ep.reward, ep.termination
        self.components, self.score_info, self.error = ep.components, ep.score_info, ep.error


@dataclass(eq=False)
class EpisodeAdapter:
    """gepa's GEPAAdapter over gapforge's episodes (module docstring). Called from gepa's thread; plays on `loop`."""

    propose_new_texts = None

    base: PolicyModel
    make_env: Callable[[], TargetEnvironment]
    _: KW_ONLY
    loop: asyncio.AbstractEventLoop
    max_metric_calls: int
    families: dict[str, str] | None = None
    max_turns: int = 30
    temperature: float | None = None
    concurrency: int = 4
    timeout_s: float | None = None
    env_name: str = ""
    metric_calls: int = 0

    def __post_init__(self) -> None:
        self.families = dict(self.families or {})

    async def _play(self, tasks: Sequence[str], prompt: str) -> list[EpisodeRecord]:
        policy = PromptedPolicy(self.base, prompt, name=GEPA)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(task: str) -> EpisodeRecord:
            async with gate:
                return await play_episode(
                    policy,
                    self.make_env,
                    task,
                    0,
                    max_turns=self.max_turns,
                    temperature=self.temperature,
                    executor=None,
                    timeout_s=self.timeout_s,
                    env_name=self.env_name,
                )

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        if self.metric_calls + len(batch) > self.max_metric_calls:
            raise GepaConfigError(  # past the budget: a bug in the stopping rule, never the model's
                f"GEPA asked for {len(batch)} episodes with {self.max_metric_calls - self.metric_calls} of its budget "
                "left: raise evaluation.gepa_max_metric_calls"
            )
        episodes = asyncio.run_coroutine_threadsafe(self._play(batch, candidate[COMPONENT]), self.loop).result()
        self.metric_calls += len(batch)
        lost = [ep for ep in episodes if ep.infrastructure_failure]
        if lost:  # the endpoint's or the sandbox's, not the prompt's: no score is made up for it
            raise IncompleteStage(
                f"GEPA: {len(lost)} of {len(batch)} episodes ended by the infrastructure ({lost[0].termination}: {lost[0].error})"
            )
        played = [self._played(ep) for ep in episodes] if capture_traces else None
        outputs = [{"task": str(ep.task), "success": ep.success, "reward": ep.reward} for ep in episodes]
        return EvaluationBatch(
            outputs=outputs, scores=[ep.reward for ep in episodes], trajectories=played, num_metric_calls=len(batch)
        )

    def _played(self, ep: EpisodeRecord) -> dict[str, Any]:
        """One episode as the reflective dataset shows it."""
        family = self.families.get(str(ep.task), "")
        return {
            "Task": f"{ep.task} (family {family or '-'})",
            "Outcome": "SUCCESS" if ep.success else "FAILURE",
            "Score": f"{ep.reward:.2f}",
            "Episode": compact_episode(_EpisodeView(ep, family), ByteEstimate(), budget_tokens=1500).text,
            "Feedback": feedback(ep),
        }

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        records = list(eval_batch.trajectories or [])
        return {c: records for c in components_to_update}


class _Quiet:
    """gepa's logger: kept, never printed (stage services do not print)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


async def optimize_prompt(
    base: PolicyModel,
    make_env: Callable[[], TargetEnvironment],
    tasks: Sequence[str],
    capabilities: Sequence[dict[str, str]],
    reflection: Any,
    *,
    max_metric_calls: int,
    minibatch: int = 3,
    seed: int = 0,
    **play: Any,
) -> GepaRecord:
    """GEPA on `tasks` (the analysis split) from the capability-hints seed, at most `max_metric_calls` episodes
    (`play`: EpisodeAdapter's settings). `reflection`: a LangChain chat model (the `llm` role,
    agents.prompt_opt.reflection_model)."""
    try:
        import gepa
    except ModuleNotFoundError:
        raise GepaConfigError(
            "the gepa comparison needs the gepa package: pip install 'gapforge[gepa]', "
            "or take gepa out of evaluation.comparisons"
        ) from None
    tasks = [str(t) for t in tasks]
    if not tasks:
        raise GepaConfigError("GEPA needs analysis-split tasks to optimise on; the run has none stored")
    if max_metric_calls < len(tasks):
        raise GepaConfigError(
            f"GEPA's budget of {max_metric_calls} metric calls is below one evaluation of the {len(tasks)} "
            "analysis tasks: raise evaluation.gepa_max_metric_calls"
        )
    seed_prompt, _ = hints_text(list(capabilities))
    adapter = EpisodeAdapter(base, make_env, loop=asyncio.get_running_loop(), max_metric_calls=max_metric_calls, **play)
    lm = ReflectionLM(reflection)
    template, template_id = reflection_template()
    minibatch = min(minibatch, len(tasks))
    per_iteration = 2 * minibatch + len(tasks)  # stop before an iteration that could pass the budget (module doc)
    result = await asyncio.to_thread(
        gepa.optimize,
        seed_candidate={COMPONENT: seed_prompt},
        trainset=tasks,
        valset=tasks,
        adapter=adapter,
        reflection_lm=lm,
        reflection_prompt_template=template,
        reflection_minibatch_size=minibatch,
        stop_callbacks=[lambda state: adapter.metric_calls + per_iteration > max_metric_calls],
        logger=_Quiet(),
        seed=seed,
        raise_on_exception=True,
    )
    best = result.best_candidate[COMPONENT]  # type: ignore[index]
    return GepaRecord(
        prompt=best,
        seed_prompt=seed_prompt,
        prompt_id=f"{GEPA}@{hashlib.sha256(best.encode()).hexdigest()[:12]}",
        metric_calls=adapter.metric_calls,
        max_metric_calls=max_metric_calls,
        tasks=tasks,
        candidates=len(result.candidates),
        seed_score=float(result.val_aggregate_scores[0]),
        best_score=float(result.val_aggregate_scores[result.best_idx]),
        reflection_prompt=template_id,
        reflection_calls=lm.calls,
        gepa_version=version("gepa"),
    )


class _Gepa(Comparison):
    """The base under GEPA's optimised system prompt (`gepa` in `evaluation.comparisons`, extra `gepa`): optimised (or the
    run's stored prompt reused) before the held-out evaluation, then played there as `gepa`."""

    name, kind, optional = GEPA, "baseline", True

    async def prepare(self, ev: Evaluation) -> GepaRecord:
        """The run's stored prompt when it was optimised at this budget from this seed; else GEPA on the stored
        split's analysis tasks (the config's rollout settings, the `llm` role as reflection LM), stored as the row
        `gepa_prompt`, and what it spent added to `ev` (a stored prompt reused was spent by an earlier call)."""
        from gapforge.agents.prompt_opt import reflection_model

        cfg, split = ev.cfg, ev.split
        if split is None or split.env != ev.env:
            raise ev.failure(
                f"the gepa comparison optimises on the run's analysis split, and {ev.env} has none stored: "
                "evaluate the run's own env or take gepa out of evaluation.comparisons"
            )
        capabilities = ev.artifacts.capabilities
        budget = gepa_budget(cfg, len(ev.artifacts.adapter_paths))
        record = load_gepa(ev.store, ev.run_id)
        if record is None or record.max_metric_calls != budget or record.seed_prompt != hints_text(capabilities)[0]:
            record = await optimize_prompt(
                ev.backend.policy(None, temperature=cfg.policy.temperature, name="base"),
                ev.make_env,
                split.analysis_tasks,
                capabilities,
                reflection_model(cfg.llm, split.env),
                max_metric_calls=budget,
                minibatch=GEPA_MINIBATCH,
                families=dict(split.families),
                max_turns=cfg.rollouts.max_turns,
                temperature=cfg.policy.temperature,
                concurrency=cfg.rollouts.concurrency,
                seed=cfg.seed,
                timeout_s=episode_limit_s(cfg.rollouts, cfg.policy, cfg.llm),
                env_name=split.env,
            )
            save_gepa(ev.store, ev.run_id, record)
            ev.policy_rollouts += record.metric_calls  # episodes of the policy
            ev.llm_calls += record.reflection_calls  # the `llm` role
        ev.progress(
            f"gepa: {record.metric_calls} of {record.max_metric_calls} metric calls, analysis-split reward "
            f"{record.seed_score:.2f} -> {record.best_score:.2f}"
        )
        return record

    def policies(
        self, base: Any, backend: Any, capabilities: Sequence[dict[str, str]], temperature: float, prepared: Any
    ) -> dict[str, Any]:
        return {} if prepared is None else {GEPA: gepa_policy(base, prepared)}

    def labels(self, store: Store, run_id: str) -> dict[str, str]:
        return {GEPA: gepa_label(load_gepa(store, run_id))}


GEPA_COMPARISON = _Gepa()
