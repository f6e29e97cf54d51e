"""Evaluation statistics over tasks: pass rate, mean reward, pass^k (as τ²-bench reports it), bootstrap 95% intervals
over tasks, paired differences vs a baseline.

Input of the task-level functions: `{task_id: [(reward, success), ...]}` (K trials per task); their bootstrap
resamples TASKS with replacement (trials of one task stay together). The episode-level paired difference takes
`{task_id: {sample: (reward, success)}}`: episode (task, i) of a policy is paired with episode (task, i) of the base
(common random numbers), and its bootstrap is two-stage: tasks with replacement, then pairs within each drawn task.
Generators are seeded: the same episodes give the same intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from math import comb

import numpy as np

Trials = Mapping[str, Sequence[tuple[float, bool]]]
Episodes = Mapping[str, Mapping[int, tuple[float, bool]]]  # task -> sample -> (reward, success)


def interval(
    values: np.ndarray, stat: Callable[[np.ndarray], float], *, n_boot: int, seed: int
) -> dict[str, float | None]:
    """{value, low, high}: the statistic and its 95% percentile bootstrap interval over rows (tasks)."""
    if len(values) == 0:
        return {"value": None, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    boots = np.array([stat(values[i]) for i in idx])
    low, high = np.percentile(boots, [2.5, 97.5])
    return {"value": float(stat(values)), "low": float(low), "high": float(high)}


def pass_hat_k(successes: Sequence[Sequence[bool]], k: int) -> float | None:
    """τ²-bench's pass^k: mean over tasks of C(c, k) / C(n, k) (all k of k i.i.d. trials succeed); tasks with n < k skipped."""
    vals = [comb(sum(s), k) / comb(len(s), k) for s in successes if len(s) >= k]
    return float(np.mean(vals)) if vals else None


def summarize(trials: Trials, *, n_boot: int = 1000, seed: int = 0) -> dict[str, object]:
    """Metrics of one policy: pass rate and mean reward with intervals, pass^k for k = 1..K, counts."""
    tasks = sorted(trials)
    per_task_success = np.array([np.mean([s for _, s in trials[t]]) for t in tasks], dtype=float)
    per_task_reward = np.array([np.mean([r for r, _ in trials[t]]) for t in tasks], dtype=float)
    k_max = min((len(trials[t]) for t in tasks), default=0)
    succ = [[s for _, s in trials[t]] for t in tasks]
    return {
        "tasks": len(tasks),
        "episodes": sum(len(trials[t]) for t in tasks),
        "pass_rate": interval(per_task_success, np.mean, n_boot=n_boot, seed=seed),
        "mean_reward": interval(per_task_reward, np.mean, n_boot=n_boot, seed=seed),
        "pass_hat_k": {str(k): pass_hat_k(succ, k) for k in range(1, k_max + 1)},
    }


def paired_difference(trials: Trials, base: Trials, *, n_boot: int = 1000, seed: int = 0) -> dict[str, object]:
    """Policy minus base on the tasks both ran: per-task mean success / reward differences, bootstrap over tasks."""
    common = sorted(set(trials) & set(base))
    d_success = np.array(
        [np.mean([s for _, s in trials[t]]) - np.mean([s for _, s in base[t]]) for t in common], dtype=float
    )
    d_reward = np.array(
        [np.mean([r for r, _ in trials[t]]) - np.mean([r for r, _ in base[t]]) for t in common], dtype=float
    )
    return {
        "tasks": len(common),
        "pass_rate": interval(d_success, np.mean, n_boot=n_boot, seed=seed),
        "mean_reward": interval(d_reward, np.mean, n_boot=n_boot, seed=seed),
    }


def as_trials(episodes: Episodes) -> dict[str, list[tuple[float, bool]]]:
    """{task: {sample: row}} -> {task: [row, ...]} in sample order."""
    return {t: [rows[s] for s in sorted(rows)] for t, rows in episodes.items()}


def paired_episodes(
    episodes: Episodes, base: Episodes, *, tasks: Collection[str] | None = None, n_boot: int = 1000, seed: int = 0
) -> dict[str, object]:
    """Policy minus base over the (task, sample) pairs both played (of `tasks`, default all).

    The value is the mean over tasks of the task's mean paired difference (each task weighs the same, as in pass_rate;
    more trials sharpen a task's mean, they do not reweight it). The 95% interval is a two-stage percentile bootstrap:
    draw the tasks with replacement, then the pairs within each drawn task. It answers "would other tasks of this
    kind, and other samples, move the same way", so it stays honest when a task has one or two pairs: resampling pairs
    only within fixed tasks gives such a family an interval of zero width (one trial per task leaves nothing to
    resample), which reads as certainty it does not have.

    When every pair has the same difference c (five compound tasks both policies fail: all 0), no resample can differ
    and the bootstrap interval has zero width. Then the interval is what n pairs can carry: with none of them seen to
    deviate from c, at most u = 1 - 0.025^(1/n) of such pairs do (Clopper-Pearson, one side of a 95% interval), and a
    deviating pair's difference lies in [-1, 1], so the mean lies in [c - u(c + 1), c + u(1 - c)]: 5 tied pairs give
    +0.0 [-0.52, +0.52], 48 give [-0.074, +0.074]. The pass rate always; the mean reward when every reward is in [0,
    1] (otherwise no bound holds, and the zero-width bootstrap is what it is).
    """
    pairs: dict[str, list[int]] = {}
    for t in sorted(set(episodes) & set(base)):
        if tasks is None or t in tasks:
            common = sorted(set(episodes[t]) & set(base[t]))
            if common:
                pairs[t] = common
    out: dict[str, object] = {"episodes": sum(len(s) for s in pairs.values()), "tasks": len(pairs)}
    if not pairs:
        return out | {
            "pass_rate": {"value": None, "low": None, "high": None},
            "mean_reward": {"value": None, "low": None, "high": None},
        }
    rng = np.random.default_rng(seed)
    within = np.zeros((len(pairs), 2, n_boot))  # task -> its mean paired difference under each within-task resample
    values = np.zeros(2)
    every: list[np.ndarray] = []  # each task's (2, pairs) differences
    for k, (t, samples) in enumerate(pairs.items()):  # sorted tasks: the same draws every time
        d = np.array(
            [[float(episodes[t][s][1]) - float(base[t][s][1]), episodes[t][s][0] - base[t][s][0]] for s in samples]
        ).T
        every.append(d)
        idx = rng.integers(0, len(samples), size=(n_boot, len(samples)))
        within[k] = d[:, idx].mean(axis=2)
        values += d.mean(axis=1)
    values /= len(pairs)
    diffs = np.concatenate(every, axis=1)  # (2, all pairs)
    drawn = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))  # stage one: which tasks each resample holds
    boots = within[drawn, :, np.arange(n_boot)[:, None]].mean(axis=1).T  # (2, n_boot)
    ivs = []
    for i in range(2):
        low, high = np.percentile(boots[i], [2.5, 97.5])
        if np.all(diffs[i] == diffs[i, 0]) and (i == 0 or _unit_rewards(episodes, base, pairs)):
            low, high = _tied_interval(float(diffs[i, 0]), diffs.shape[1])
        ivs.append({"value": float(values[i]), "low": float(low), "high": float(high)})
    return out | {"pass_rate": ivs[0], "mean_reward": ivs[1]}


def _unit_rewards(episodes: Episodes, base: Episodes, pairs: Mapping[str, list[int]]) -> bool:
    """Every paired reward lies in [0, 1] (so a pair's reward difference lies in [-1, 1])."""
    return all(
        0.0 <= side[t][s][0] <= 1.0 for t, samples in pairs.items() for s in samples for side in (episodes, base)
    )


def _tied_interval(c: float, n_pairs: int) -> tuple[float, float]:
    """The 95% interval of a mean difference when all n pairs showed the same difference c (in [-1, 1])."""
    u = 1.0 - 0.025 ** (1.0 / n_pairs)
    return c - u * (c + 1.0), c + u * (1.0 - c)


def paired_by_family(
    episodes: Episodes, base: Episodes, families: Mapping[str, str], *, n_boot: int = 1000, seed: int = 0
) -> dict[str, dict[str, object]]:
    """paired_episodes() restricted to each family's tasks (tasks without a family go under 'unknown')."""
    groups: dict[str, set[str]] = {}
    for t in set(episodes) | set(base):
        groups.setdefault(families.get(t, "unknown"), set()).add(t)
    return {
        fam: paired_episodes(episodes, base, tasks=ts, n_boot=n_boot, seed=seed) for fam, ts in sorted(groups.items())
    }


def by_family(
    trials: Trials, families: Mapping[str, str], *, n_boot: int = 1000, seed: int = 0
) -> dict[str, dict[str, object]]:
    """summarize() per task family (tasks without a family go under 'unknown')."""
    groups: dict[str, dict[str, Sequence[tuple[float, bool]]]] = {}
    for t, rows in trials.items():
        groups.setdefault(families.get(t, "unknown"), {})[t] = rows
    return {fam: summarize(g, n_boot=n_boot, seed=seed) for fam, g in sorted(groups.items())}
