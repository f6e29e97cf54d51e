"""Oracle routing as a yardstick for the router (docs/evaluation.md): per held-out task, the best single policy (the
base or one adapter), chosen without selection bias.

For each task, the trials used are the samples every candidate (base, each `adapter:<name>`) and the routed policy all
played: with paired seeds (common random numbers, evaluation/run.py) sample i is the same draw for every policy. The
even-numbered of those trials (0, 2, 4, ...) SELECT: the candidate with the highest pass rate on them, then the
highest mean reward, then the earlier candidate (base first) wins. The odd-numbered ones (1, 3, ...) SCORE: the
oracle's episodes on a task are its choice's episodes on those trials only, so a policy is never credited with the
luck it was picked on. Every policy is scored on the same odd trials, and routed TRACE is compared with the oracle and
with each single policy pair by pair on them (`stats.paired_episodes`). A task with fewer than 2 common trials (one
trial per task, as when adapters play `evaluation.trials=1`) cannot be split: it is left out and counted by family.

The router's confusion against the oracle: per task used, the router's choice (the routed policy's stored decision:
its adapter, or base) against the oracle's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapforge.agents.router import confusion
from gapforge.evaluation import stats
from gapforge.evaluation.comparisons import Comparison
from gapforge.evaluation.summary import BASE, ROUTED, interval, pairs, signed, verdict

if TYPE_CHECKING:
    from gapforge.store import Store

ORACLE_ROW = "oracle"


def _mean(rows: Sequence[tuple[float, bool]], i: int) -> float:
    return sum(float(r[i]) for r in rows) / len(rows)


def oracle_routing(
    episodes: Mapping[str, stats.Episodes],
    candidates: Sequence[str],
    *,
    routed: str = ROUTED,
    router_choice: Mapping[str, str] | None = None,
    families: Mapping[str, str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The oracle's metrics from {policy: {task: {sample: (reward, success)}}} (module doc). `candidates`: the single
    policies in tie-break order (base first); `router_choice`: {task: the candidate the router chose}."""
    families = families or {}
    players = [*candidates, *([routed] if routed in episodes else [])]
    tasks = sorted(set.intersection(*(set(episodes.get(p, {})) for p in players))) if players else []
    every = sorted(set().union(*(set(episodes.get(p, {})) for p in players))) if players else []
    choice: dict[str, str] = {}
    scored: dict[str, dict[str, dict[int, tuple[float, bool]]]] = {p: {} for p in [*players, ORACLE_ROW]}
    left: Counter[str] = Counter()
    for task in every:
        common = sorted(set.intersection(*(set(episodes[p][task]) for p in players))) if task in tasks else []
        if len(common) < 2:
            left[families.get(task, "unknown")] += 1
            continue
        select, score = common[0::2], common[1::2]
        picked = [[episodes[c][task][s] for s in select] for c in candidates]
        best = max(range(len(candidates)), key=lambda i: (_mean(picked[i], 1), _mean(picked[i], 0), -i))
        choice[task] = candidates[best]
        for p in players:
            scored[p][task] = {s: episodes[p][task][s] for s in score}
        scored[ORACLE_ROW][task] = {s: episodes[choice[task]][task][s] for s in score}
    boot, vs_routed = {"n_boot": n_boot, "seed": seed}, bool(choice) and routed in episodes
    out: dict[str, Any] = {
        "split": "per task, the trials every candidate and the routed policy played: even-numbered select, odd-numbered score",
        "candidates": list(candidates),
        "tasks": len(choice),
        "left_out": dict(sorted(left.items())),  # family -> tasks with < 2 common trials
        "choices": dict(sorted(choice.items())),
        "choice_counts": dict(Counter(choice.values())),
        "scored": {p: stats.summarize(stats.as_trials(rows), **boot) for p, rows in scored.items()} if choice else {},
        "vs_oracle": {p: stats.paired_episodes(scored[p], scored[ORACLE_ROW], **boot) for p in players if choice},
        "routed": routed if routed in episodes else None,
        "routed_vs": {c: stats.paired_episodes(scored[routed], scored[c], **boot) for c in candidates if vs_routed},
    }
    if router_choice is not None and choice:
        used = [(choice[t], router_choice[t]) for t in choice if t in router_choice]
        labels = [*candidates, *sorted({r for _, r in used} - set(candidates))]
        out["router_vs_oracle"] = confusion(used, labels)  # rows = the oracle's choice, columns = the router's
    return out


def policy_episodes(
    store: Store, metrics: Mapping[str, Any], env: str | None = None, families: Mapping[str, str] | None = None
) -> stats.Episodes:
    """A policy's evaluated episodes (its child run, in `env` or its own), the samples its evaluation counted (trials
    per task of its family: `families`' task -> family, else the stored episode's own)."""
    per_family, default = metrics.get("trials_by_family") or {}, int(metrics.get("trials") or 1)
    out: dict[str, dict[int, tuple[float, bool]]] = {}
    for r in store.episodes(metrics["child_run"], env=env or metrics.get("env")):
        family = r.task_family if families is None else families.get(r.task_id, "")
        if r.sample < int(per_family.get(family, default)):
            out.setdefault(r.task_id, {})[r.sample] = (float(r.reward), bool(r.success))
    return out


def oracle_from_store(store: Store, run_id: str, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """The oracle over the run's stored evaluation (None when the base was not evaluated)."""
    evals = {e.name.removeprefix("eval:"): e for e in store.evaluations(run_id) if e.name.startswith("eval:")}
    if BASE not in evals or "child_run" not in evals[BASE].metrics:
        return None
    env = evals[BASE].metrics["env"]
    split = store.get_split(run_id)
    families = dict(split.families) if split is not None else {}
    candidates = [BASE, *sorted(n for n in evals if n.startswith("adapter:"))]
    players = [*candidates, *([ROUTED] if ROUTED in evals else [])]
    episodes = {p: policy_episodes(store, evals[p].metrics, env, families) for p in players}
    router_choice = None
    if ROUTED in evals:
        decisions = evals[ROUTED].metrics.get("routing") or {}
        router_choice = {t: f"adapter:{d['adapter']}" if d.get("adapter") else BASE for t, d in decisions.items()}
    return oracle_routing(
        episodes, candidates, router_choice=router_choice, families=families, n_boot=n_boot, seed=seed
    )


def store_oracle(store: Store, run_id: str, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """Compute the oracle over the run's evaluation and store it as the evaluations row `oracle`."""
    metrics = oracle_from_store(store, run_id, n_boot=n_boot, seed=seed)
    if metrics is not None:
        store.put_evaluation(run_id, ORACLE_ROW, policy=ORACLE_ROW, metrics=metrics)
    return metrics


def stored_oracle(store: Store, run_id: str, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """The run's stored `oracle` row, else the oracle computed from its stored episodes."""
    row = store.get_evaluation(run_id, ORACLE_ROW)
    return row.metrics if row is not None else oracle_from_store(store, run_id, n_boot=n_boot, seed=seed)


def _rate(summary: Mapping[str, Any]) -> str:
    pr = summary.get("pass_rate") or {}
    return "–" if pr.get("value") is None else f"{pr['value']:.1%}"


def oracle_lines(m: Mapping[str, Any] | None) -> list[str]:
    """Routed TRACE, each single policy and the oracle on the oracle's scoring half, and the router's agreement with it."""
    if not m:
        return []
    if not m.get("tasks"):
        left = sum((m.get("left_out") or {}).values())
        return [
            f"oracle routing: no held-out task has 2 trials common to every policy ({left} left out): play adapters with evaluation.trials >= 2"
        ]
    scored, vs = m["scored"], m.get("vs_oracle") or {}
    rows = [n for n in [m.get("routed"), *m["candidates"]] if n in scored]
    parts = [f"{n} {_rate(scored[n])} ({pairs(vs[n])} vs oracle)" for n in rows if n in vs]
    lines = [
        f"oracle routing ({m['tasks']} held-out tasks, scored on the trials it did not select on): oracle {_rate(scored['oracle'])}; "
        + "; ".join(parts)
    ]
    conf = m.get("router_vs_oracle")
    if conf and conf.get("n"):
        lines.append(
            f"router agrees with oracle routing on {conf['accuracy']:.0%} of {conf['n']} held-out tasks "
            f"(oracle chose {', '.join(f'{k} {n}' for k, n in sorted(m['choice_counts'].items()))})"
        )
    return lines


def oracle_section(store: Store, run_id: str) -> list[str]:
    """The report's section: routed TRACE against oracle routing (the stored row, else computed from the stored
    episodes); nothing before an evaluation."""
    if not any(e.name.startswith("eval:") for e in store.evaluations(run_id)):
        return []
    m = stored_oracle(store, run_id)
    if m is None:
        return []
    left = m.get("left_out") or {}
    lines = [
        "## Oracle routing (yardstick)",
        "",
        "Per held-out task, the best single policy (base or one adapter) is picked on half of the trials every candidate "
        "and TRACE played (the even-numbered: highest pass rate, then mean reward, base on ties) and scored on the other half "
        "(the odd-numbered), so no policy is credited with the luck it was picked on; every row below is scored on those same "
        f"odd-numbered trials. Tasks used: {m['tasks']}; left out (fewer than 2 common trials): {sum(left.values())}"
        + (" (" + ", ".join(f"`{f}` {n}" for f, n in left.items()) + ")" if left else "")
        + ".",
        "",
    ]
    if not m["tasks"]:
        return [
            *lines,
            "No task has 2 trials common to every candidate: play the adapters with more trials (evaluation.trials >= 2, "
            "or their `adapter:<name>` in evaluation.family_trials_policies) to get the oracle.",
            "",
        ]
    counts = ", ".join(f"{n} {k}" for k, n in sorted(m["choice_counts"].items()))
    lines += [
        f"The oracle chose: {counts}.",
        "",
        "| policy | pass rate (scoring half) | mean reward | Δ pass rate vs oracle (paired) | N pairs | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(
        m["scored"],
        key=lambda n: (n != "oracle", n != m.get("routed"), m["candidates"].index(n) if n in m["candidates"] else 0),
    ):
        summ = m["scored"][name]
        vs = (m.get("vs_oracle") or {}).get(name) or {}
        lines.append(
            f"| {name} | {interval(summ['pass_rate'])} | {interval(summ['mean_reward'], pct=False)} | "
            f"{'–' if name == 'oracle' else signed(vs.get('pass_rate'), pct=True)} | {vs.get('episodes', '–')} | "
            f"{'–' if name == 'oracle' else verdict(vs.get('pass_rate')) or '–'} |"
        )
    if m.get("routed_vs"):
        lines += [
            "",
            f"{m['routed']} minus each single policy on the same trials (paired):",
            "",
            "| vs | Δ pass rate | Δ reward | N pairs | verdict |",
            "|---|---|---|---|---|",
        ]
        for name, d in m["routed_vs"].items():
            lines.append(
                f"| {name} | {signed(d.get('pass_rate'), pct=True)} | {signed(d.get('mean_reward'), pct=False)} | {d.get('episodes', 0)} | "
                f"{verdict(d.get('pass_rate')) or '–'} |"
            )
    conf = m.get("router_vs_oracle")
    if conf and conf.get("n"):
        labels = conf["labels"]
        lines += [
            "",
            f"Router's choice against the oracle's on {conf['n']} tasks (agreement {conf['accuracy']:.0%}; rows: the oracle's choice):",
            "",
            "| oracle ↓ / router → | " + " | ".join(labels) + " |",
            "|---|" + "---|" * len(labels),
        ]
        lines += [f"| {lab} | " + " | ".join(str(n) for n in row) + " |" for lab, row in zip(labels, conf["matrix"])]
    return [*lines, ""]


class _Oracle(Comparison):
    """Oracle routing as the router's yardstick: stored as the row `oracle` after every held-out evaluation."""

    name = ORACLE_ROW

    def scored(self, store: Store, run_id: str, *, scope: str, seed: int) -> None:
        if scope == "eval":  # the oracle is over the held-out evaluation's trials
            store_oracle(store, run_id, seed=seed)

    def report(
        self, store: Store, run_id: str, out_dir: Path, labels: Mapping[str, str]
    ) -> tuple[list[str], list[Path]]:
        return oracle_section(store, run_id), []

    def lines(self, store: Store, run_id: str, cfg: Any) -> list[str]:
        return oracle_lines(stored_oracle(store, run_id))


ORACLE_COMPARISON = _Oracle()
