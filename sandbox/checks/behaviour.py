"""Checks 2-4: deterministic (same seed -> same episode), diverse (different
seeds -> different scenarios), solvable (the reference solution scores ~1)."""

from __future__ import annotations

from typing import Any

from gapforge.sandbox.checks.probe import EnvFault, Probe, ReplayedEpisode, canonical
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.checks.settings import SelfTestThresholds


def _fault(name: str, fault: EnvFault) -> CheckResult:
    return CheckResult.fail(name, fault.describe(), **fault.evidence())


def first_difference(a: ReplayedEpisode, b: ReplayedEpisode) -> dict[str, Any] | None:
    """Where two replays of the same seed and actions first differ (None when identical)."""
    (ia, sa, ra), (ib, sb, rb) = a.fingerprint(), b.fingerprint()
    if ia != ib:
        i = next((k for k, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
        return {
            "where": f"initial message {i}",
            "first": _short(ia[i] if i < len(ia) else None),
            "second": _short(ib[i] if i < len(ib) else None),
        }
    if sa != sb:
        i = next((k for k, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb)))
        return {
            "where": f"answer to action {i}",
            "first": _short(sa[i] if i < len(sa) else None),
            "second": _short(sb[i] if i < len(sb) else None),
        }
    if ra != rb:
        return {"where": "score", "first": _short(ra), "second": _short(rb)}
    return None


def _short(value: Any, limit: int = 300) -> str:
    text = canonical(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_deterministic(probe: Probe, seeds: list[int], th: SelfTestThresholds) -> CheckResult:
    """Replay the reference solution of a few seeds again in a fresh env, in reverse order and
    after another seed's episode (so state leaking between episodes shows up), and compare."""
    chosen = seeds[: th.determinism_seeds]
    try:
        first = {s: probe.reference(s) for s in chosen}
        env = probe.fresh()
        other = seeds[-1] if len(seeds) > 1 else chosen[0]
        probe.guard("reset", other, env.reset, other)
        for seed in reversed(chosen):
            actions = probe.solution(seed, env)
            if canonical(actions) != canonical(probe.reference_actions(seed)):
                return CheckResult.fail(
                    "deterministic",
                    f"solution({seed}) returned different actions on a second call",
                    seed=seed,
                    first=_short(probe.reference_actions(seed)),
                    second=_short(actions),
                )
            diff = first_difference(first[seed], probe.play(seed, actions, env))
            if diff:
                return CheckResult.fail(
                    "deterministic",
                    f"seed {seed}: replaying the same actions differs at {diff['where']}",
                    seed=seed,
                    **diff,
                )
    except EnvFault as fault:
        return _fault("deterministic", fault)
    return CheckResult.ok("deterministic", f"{len(chosen)} seeds replayed identically in a fresh env", seeds=chosen)


def check_diverse(probe: Probe, seeds: list[int], th: SelfTestThresholds) -> CheckResult:
    """Different seeds must give different scenarios (>= diverse_share distinct). A scenario is what the agent
    meets: the initial conversation AND the reference episode (the env's answers to the reference actions, its
    score). Two customers who open with the same words, as a target's customers often do, are still two
    scenarios when their records differ; a seed that changes nothing the agent can meet is not."""
    groups: dict[str, list[int]] = {}
    try:
        for seed in seeds:
            groups.setdefault(_scenario_key(probe.reference(seed)), []).append(seed)
    except EnvFault as fault:
        return _fault("diverse", fault)
    share = len(groups) / len(seeds)
    duplicates = [g for g in groups.values() if len(g) > 1]
    evidence = {
        "distinct": len(groups),
        "seeds": len(seeds),
        "share": round(share, 3),
        "same_scenario_seeds": duplicates[:5],
    }
    if share < th.diverse_share:
        return CheckResult.fail(
            "diverse",
            f"only {len(groups)} distinct scenarios over {len(seeds)} seeds ({share:.0%} < {th.diverse_share:.0%})",
            **evidence,
        )
    return CheckResult.ok("diverse", f"{len(groups)}/{len(seeds)} distinct scenarios", **evidence)


def _scenario_key(episode: ReplayedEpisode) -> str:
    """The reference episode without its call ids (the probe numbers them by seed)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("tool_call_id", "id")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return canonical(strip(episode.fingerprint()))


def check_solvable(probe: Probe, seeds: list[int], th: SelfTestThresholds) -> CheckResult:
    """The reference solution must reach solved_reward on >= solvable_share of the seeds."""
    unsolved: list[dict[str, Any]] = []
    rewards: list[float] = []
    try:
        for seed in seeds:
            episode = probe.reference(seed)
            rewards.append(episode.reward)
            if episode.reward < th.solved_reward:
                assert episode.score is not None
                unsolved.append(
                    {
                        "seed": seed,
                        "reward": round(episode.reward, 4),
                        "components": episode.score.components,
                        "actions": len(probe.reference_actions(seed)),
                        "done_after_action": episode.done_after,
                    }
                )
    except EnvFault as fault:
        return _fault("solvable", fault)
    share = 1 - len(unsolved) / len(seeds)
    evidence = {
        "solved_share": round(share, 3),
        "mean_reward": round(sum(rewards) / len(rewards), 4),
        "unsolved": unsolved[:5],
    }
    if share < th.solvable_share:
        worst = unsolved[0]
        return CheckResult.fail(
            "solvable",
            f"reference solution solves {share:.0%} of seeds (< {th.solvable_share:.0%}); "
            f"seed {worst['seed']} scored {worst['reward']}",
            **evidence,
        )
    return CheckResult.ok("solvable", f"reference solution solves {share:.0%} of {len(seeds)} seeds", **evidence)
