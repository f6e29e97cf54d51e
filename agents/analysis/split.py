"""The split against contamination: a target's tasks -> analysis split + held-out split. Deterministic (seeded),
stratified by task family, stored with the run; analysis reads only the analysis split, evaluation reports on the
held-out one (`store.get_split(run).heldout_tasks`), and `split_openings` hands the openings of both splits to the
self-test's contamination check.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapforge.agents.errors import AnalysisError
from gapforge.agents.router import first_user_message
from gapforge.sandbox.checks.contamination import SplitTexts

if TYPE_CHECKING:
    from gapforge.store import Store


@dataclass(frozen=True)
class TaskSplit:
    env: str
    seed: int
    fraction: float
    analysis: tuple[str, ...]
    heldout: tuple[str, ...]
    families: dict[str, str]


def split_tasks(families: Mapping[str, str], fraction: float, seed: int, env: str = "") -> TaskSplit:
    """Per family: shuffle its tasks (seeded by seed and family), the first round(n * fraction)
    go to analysis (at least one; at least one held out when fraction < 1 and n >= 2)."""
    if not 0.0 < fraction <= 1.0:
        raise AnalysisError(f"split fraction {fraction} must be in (0, 1]: set analysis.split_fraction")
    by_family: dict[str, list[str]] = defaultdict(list)
    for task, family in families.items():
        by_family[family or "-"].append(task)
    analysis: list[str] = []
    for family in sorted(by_family):
        tasks = sorted(by_family[family])
        random.Random(f"{seed}:{family}").shuffle(tasks)
        k = max(1, round(len(tasks) * fraction))
        if fraction < 1.0 and len(tasks) >= 2:
            k = min(k, len(tasks) - 1)
        analysis += tasks[:k]
    chosen = set(analysis)
    heldout = sorted(t for t in families if t not in chosen)
    return TaskSplit(
        env, seed, fraction, tuple(sorted(analysis)), tuple(heldout), {t: families[t] or "-" for t in families}
    )


def heldout_samples(user: str, env: str, samples: int) -> int:
    """Episodes the collection plays of each held-out task. The analysis never reads them; the contamination check
    guards their openings (`split_openings`). One is enough where the opening is the same in every sample (a built-in
    target's scripted user); else `samples` (an LLM user may write its own opening, a user's class may draw it)."""
    from gapforge.envs.registry import is_builtin

    return 1 if user == "scripted" and is_builtin(env) else samples


def _families_of(env: str, episodes: list[Any]) -> dict[str, str]:
    """Task families of the tasks the run collected (a run restricted with rollouts.tasks is split, and
    evaluated, on those only), from the target env; the episodes' own when it is not a registered target."""
    collected = {e.task_id for e in episodes}
    try:
        from gapforge.envs.registry import make_env

        target: Any = make_env(env)
        return {t: target.task_family(t) for t in target.task_ids() if t in collected}
    except Exception:  # noqa: BLE001 - not a registered target env (or its extra is missing): use what was collected
        return {e.task_id: e.task_family or "-" for e in episodes}


def run_episodes(store: Store, run_id: str) -> list[Any]:
    """A run's episodes without messages when the store offers it (episode_summaries), else with."""
    summaries = getattr(store, "episode_summaries", None)
    return list(summaries(run_id) if summaries is not None else store.episodes(run_id))


def ensure_split(
    store: Store,
    run_id: str,
    *,
    fraction: float,
    seed: int,
    episodes: list[Any] | None = None,
    target: tuple[str, Mapping[str, str]] | None = None,
) -> TaskSplit:
    """The run's stored split, or a new one stored now: over `target` (env, {task: family}) when given (the collection
    splits before it plays), else over the tasks of the run's episodes. A stored split made with other settings is an
    error (changing it on a resumed run would let held-out tasks into the analysis)."""
    stored = store.get_split(run_id)
    if stored is not None:
        if abs(stored.fraction - fraction) > 1e-12 or stored.seed != seed:
            raise AnalysisError(
                f"run {run_id!r} already has a task split (fraction {stored.fraction}, seed {stored.seed}): "
                "keep those settings or analyse in a new run"
            )
        analysis, heldout = tuple(stored.analysis_tasks), tuple(stored.heldout_tasks)
        return TaskSplit(stored.env, stored.seed, stored.fraction, analysis, heldout, dict(stored.families))
    if target is not None:
        split = split_tasks(target[1], fraction, seed, env=target[0])
        return _store_split(store, run_id, split)
    eps = episodes if episodes is not None else run_episodes(store, run_id)
    envs = sorted({e.env for e in eps})
    if not envs:
        raise AnalysisError(
            f"run {run_id!r} has no episodes: collect rollouts first (gapforge rollouts collect --run {run_id})"
        )
    if len(envs) > 1:
        raise AnalysisError(f"run {run_id!r} mixes envs {', '.join(envs)}: analyse one target env per run")
    return _store_split(store, run_id, split_tasks(_families_of(envs[0], eps), fraction, seed, env=envs[0]))


def _store_split(store: Store, run_id: str, split: TaskSplit) -> TaskSplit:
    tasks = {"analysis_tasks": split.analysis, "heldout_tasks": split.heldout, "families": split.families}
    store.put_split(run_id, env=split.env, seed=split.seed, fraction=split.fraction, **tasks)
    return split


def analysis_episodes(store: Store, run_id: str, *, fraction: float, seed: int) -> list[Any]:
    """The run's episodes on analysis-split tasks (held-out tasks are never shown to the analyst)."""
    eps = run_episodes(store, run_id)
    split = ensure_split(store, run_id, fraction=fraction, seed=seed, episodes=eps)
    keep = set(split.analysis)
    return [e for e in eps if e.task_id in keep]


def split_openings(
    store: Store, run_id: str, env: str | None = None, *, unseen_env: str | None = None
) -> SplitTexts | None:
    """The openings of the run's stored episodes by split (what check `contamination` guards), None when the
    run has no stored split. Episodes of other envs than the split's are left out. `unseen_env`
    (evaluation.unseen_env): the opening of each of its tasks is held out too (`unseen_openings`)."""
    stored = store.get_split(run_id)
    if stored is None:
        return None
    analysis, heldout = set(stored.analysis_tasks), set(stored.heldout_tasks)
    by_task: dict[str, list[str]] = defaultdict(list)
    for e in store.episodes(run_id, env=env or stored.env):
        text = first_user_message(e.messages)  # the task's opening
        if text and text not in by_task[e.task_id]:
            by_task[e.task_id].append(text)
    held = {t: texts for t, texts in sorted(by_task.items()) if t in heldout}
    if unseen_env:
        held |= unseen_openings(unseen_env)
    return SplitTexts(
        heldout=held,
        analysis=[text for t, texts in sorted(by_task.items()) if t in analysis for text in texts],
    )


def unseen_openings(env: str) -> dict[str, list[str]]:
    """Task id -> [its opening] for every task of the target `env`, played with the scripted user (the unseen records
    are never collected, so no stored episode holds them). A target whose user cannot be scripted gives none: its
    openings are then not guarded."""
    from gapforge.envs.errors import EnvError
    from gapforge.envs.registry import make_env

    try:
        target: Any = make_env(env)
    except EnvError:
        return {}
    out: dict[str, list[str]] = {}
    try:
        for task in target.task_ids():
            messages = target.reset(task)
            text = next((m.content for m in messages if m.role == "user" and m.content), None)
            if text:
                out[task] = [text]
    except EnvError:
        return {}
    finally:
        target.close()
    return out
