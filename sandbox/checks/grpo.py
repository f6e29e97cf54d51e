"""Check 7: GRPO-ready. G seeds x K policy samples at the training temperature (training.temperature) must give
informative groups (reward std > 0), few all-zero / all-perfect groups, and a
mean reward inside [mean_low, mean_high].

`check_grpo_ready` runs on the caller's event loop (the policy's HTTP session lives
there and its creator closes it).
Episodes start in group order, `concurrency` at a time, with no barrier between groups (a
group's last, longest episode no longer holds the next group back: the demo's checks ran
in waves of one group and decoded mostly one or two rows at the tail of each). The groups
are graded in order: with `early_exit` the check stops at the first group after which the
all-zero, all-perfect or uninformative groups seen already exceed their limit, so a hopeless
env does not spend the whole G x K budget; episodes of later groups not yet started are
skipped, those already playing finish and are not graded. So the verdict is the same at
any concurrency and any timing: it grades the shortest prefix of groups that decides it.
The evidence records the policy rollouts graded (`rollouts`) and, when it differs, every
episode the policy played (`played`: the ungraded ones and replays too; what the rollout
budget is charged).

An episode ended by the infrastructure (envs.errors.INFRA_TERMINATIONS: the policy
endpoint down after its retries, the sandbox lost) is not a reward: it is played
again (`INFRA_RETRIES` times), and past that the check raises
envs.errors.InfrastructureFailure once the episodes in flight have ended: the stage
stops (exit 3), the env is never blamed. Episodes re-played are counted
(`infra_retried` in the evidence).

An episode that ended in `env_error` (the env's code raised mid-episode) or `timeout` (it did not finish
within `grpo_readiness.episode_timeout_s`, or the episode runner's own limit fired) is dropped from its
group, never graded as a reward of 0, and counted (`dropped` in the evidence); its group is graded on the
episodes left. An env error is still the env's fault: the check fails naming it, as the generator must fix
it. When timeouts leave no group with an episode, the check raises InfrastructureFailure (the stage stops,
exit 3: resumable) instead of a verdict."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from statistics import mean, pstdev
from typing import Any

from gapforge.envs.errors import InfrastructureFailure, infra_cause
from gapforge.envs.protocol import PolicyModel
from gapforge.envs.sampling import episode_key
from gapforge.sandbox.checks.probe import OpenEnv, ValidatedEnv
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.sandbox.errors import EnvCodeError, SandboxError, SandboxLost

# (policy, env, seed, temperature) -> the episode: a reward, or an object with `.reward` and
# optionally `.termination` / `.error` (agents.policy.EpisodeRecord). The composition root passes
# agents.policy.run_episode adapted to this signature; sandbox/ never imports agents/.
EpisodeRunner = Callable[[PolicyModel, ValidatedEnv, int, float], Awaitable[Any]]
PERFECT = 0.99
DROPPED = ("env_error", "timeout")  # terminations dropped from a group and counted, never graded
INFRA_RETRIES = (
    1  # an episode the infrastructure ended is played again this many times (the client and sandbox retry first)
)


async def check_grpo_ready(
    open_env: OpenEnv,
    seeds: list[int],
    policy: PolicyModel | None,
    run_episode: EpisodeRunner | None,
    cfg: GRPOReadinessConfig,
    *,
    concurrency: int = 4,
    early_exit: bool = True,
) -> CheckResult:
    """The check on the caller's event loop: the policy's requests (and its HTTP session) stay
    on that loop; opening and closing envs (blocking: a sandbox lease) run in worker threads."""
    if policy is None or run_episode is None:
        return _no_policy()
    group_seeds = (seeds + list(range(len(seeds), cfg.groups)))[: cfg.groups]
    faults: list[dict[str, Any]] = []
    retried = [0]
    stopping = [False]  # set once the verdict is decided: episodes not yet started are skipped
    played = [0]  # episodes the policy played (retries and ungraded ones included): what the check cost
    retried_at: dict[int, int] = {}  # infrastructure retries per group seed

    async def once(seed: int, sem: asyncio.Semaphore) -> float | str | InfrastructureFailure | None:
        async with sem:
            if stopping[0]:
                return None
            played[0] += 1
            env: ValidatedEnv | None = None
            try:
                env = await asyncio.to_thread(open_env)
                try:
                    episode = await asyncio.wait_for(
                        run_episode(policy, env, seed, cfg.temperature), cfg.episode_timeout_s
                    )
                except TimeoutError:
                    return "timeout"  # the runner was cancelled at the limit: dropped, counted
                termination = getattr(episode, "termination", None)
                cause = infra_cause(termination)
                if cause is not None:  # the endpoint or the sandbox ended it: not the env's reward
                    return InfrastructureFailure(
                        cause, f"a readiness episode at seed {seed}: {str(getattr(episode, 'error', ''))[:300]}"
                    )
                if termination == "env_error":
                    faults.append(
                        {"seed": seed, "kind": "env_error", "error": str(getattr(episode, "error", ""))[:1500]}
                    )
                if termination in DROPPED:
                    return str(termination)
                return float(getattr(episode, "reward", episode))
            except SandboxLost as e:
                return InfrastructureFailure("sandbox", f"a readiness episode at seed {seed}: {e}")
            except SandboxError:
                raise
            except EnvCodeError as e:
                faults.append({"seed": seed, "kind": e.kind, "error": e.detail[:1500]})
            except Exception as e:  # noqa: BLE001 - an env failing mid-episode is data
                faults.append({"seed": seed, "kind": "exception", "error": f"{type(e).__name__}: {e}"[:1500]})
            finally:
                if env is not None:
                    await asyncio.to_thread(_close_quietly, env)
            return "env_error"

    async def one(seed: int, sample: int, sem: asyncio.Semaphore) -> float | str | InfrastructureFailure | None:
        episode_key.set(f"grpo_ready:{seed}#{sample}")  # a local policy seeds from it: reproducible at any concurrency
        for attempt in range(INFRA_RETRIES + 1):
            out = await once(seed, sem)
            if not isinstance(out, InfrastructureFailure):
                return out
            if attempt < INFRA_RETRIES:
                retried[0] += 1
                retried_at[seed] = retried_at.get(seed, 0) + 1
        return out

    sem = asyncio.Semaphore(concurrency)  # FIFO: episodes get their turn in group order
    tasks = {s: [asyncio.ensure_future(one(s, k, sem)) for k in range(cfg.samples)] for s in group_seeds}
    groups: dict[int, list[float]] = {}
    dropped: dict[str, int] = {}  # termination -> episodes left out of their group
    reached: set[int] = set()  # groups whose episodes were all seen
    try:
        for s in group_seeds:  # graded in order; stop once the verdict can no longer become a pass
            flat = await asyncio.gather(*tasks[s])
            lost = [x for x in flat if isinstance(x, InfrastructureFailure)]
            if lost:  # never graded: the episodes in flight end (finally below), the stage stops
                raise InfrastructureFailure(
                    lost[-1].cause,
                    f"{len(lost)} of {len(flat)} readiness episodes of a group past "
                    f"{INFRA_RETRIES} retry: {lost[-1].detail}",
                )
            for x in flat:
                if isinstance(x, str):
                    dropped[x] = dropped.get(x, 0) + 1
            kept = [float(x) for x in flat if isinstance(x, float | int)]
            reached.add(s)
            if kept:
                groups[s] = kept
            if any(f["seed"] == s for f in faults) or (early_exit and bound_to_fail(groups, len(group_seeds), cfg)):
                break
    finally:
        stopping[0] = True
        await asyncio.gather(*(t for group in tasks.values() for t in group), return_exceptions=True)
    graded = [f for f in faults if f["seed"] in reached]  # a later group's faults were never graded
    if not groups and not graded:
        raise InfrastructureFailure(
            "sandbox",
            f"no readiness episode finished within grpo_readiness.episode_timeout_s="
            f"{cfg.episode_timeout_s:g} s ({dropped.get('timeout', 0)} timed out)",
        )
    result = _verdict(groups, graded, len(group_seeds), cfg, reached=len(reached))
    if dropped:
        result.evidence["dropped"] = dropped
    if retried[0]:
        result.evidence["infra_retried"] = retried[0]
    if played[0] != result.evidence.get(
        "rollouts"
    ):  # ungraded episodes of later groups, replays: the cost, not the verdict
        result.evidence["played"] = played[0]
    # what the rollout budget pays: every episode of the groups the verdict read, and every retry. Not the episodes of later
    # groups that were in flight when the check stopped early: how many had started depends on timing (a faster engine
    # started one more), and a budget that decides whether the next attempt runs must not
    result.evidence["charged"] = len(reached) * cfg.samples + sum(retried_at.get(s, 0) for s in reached)
    return result


def _no_policy() -> CheckResult:
    return CheckResult.skip(
        "grpo_ready", "no policy configured (policy.kind endpoint|local): GRPO readiness not checked"
    )


def _close_quietly(env: ValidatedEnv) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 - a broken env's close() must not end validation
        pass


def _verdict(
    groups: dict[int, list[float]],
    faults: list[dict[str, Any]],
    planned: int,
    cfg: GRPOReadinessConfig,
    *,
    reached: int | None = None,
) -> CheckResult:
    """`groups`: the graded rewards of each group (dropped episodes left out); `reached`: the groups the check saw."""
    rollouts = sum(len(r) for r in groups.values())
    reached = len(groups) if reached is None else reached
    if faults:
        f = faults[0]
        return CheckResult.fail(
            "grpo_ready",
            f"env {f['kind']} during a policy episode at seed {f['seed']}: {f['error'][:300]}",
            faults=faults[:5],
            rollouts=rollouts,
            rewards={str(s): [round(x, 3) for x in r] for s, r in groups.items()},
        )
    result = grade_groups(groups, cfg)
    result.evidence["rollouts"] = rollouts
    if reached < planned:
        result.evidence["stopped_early"] = (
            f"after {reached} of {planned} groups: the verdict could no longer become a pass"
        )
        result.summary += f" (stopped early after {reached}/{planned} groups)"
    return result


def bound_to_fail(done: dict[int, list[float]], total: int, cfg: GRPOReadinessConfig) -> bool:
    """True when the groups seen so far already exceed a limit whatever the remaining groups give."""
    zero = sum(1 for r in done.values() if max(r) <= 1e-9)
    perfect = sum(1 for r in done.values() if min(r) >= PERFECT)
    flat = sum(1 for r in done.values() if pstdev(r) <= 1e-9)
    return (
        zero > cfg.max_all_zero * total
        or perfect > cfg.max_all_perfect * total
        or flat > (1 - cfg.min_informative) * total
    )


def grade_groups(groups: dict[int, list[float]], cfg: GRPOReadinessConfig) -> CheckResult:
    """The verdict over a {seed: [K rewards]} matrix."""
    n = len(groups)
    informative = sum(1 for r in groups.values() if pstdev(r) > 1e-9) / n
    all_zero = sum(1 for r in groups.values() if max(r) <= 1e-9) / n
    all_perfect = sum(1 for r in groups.values() if min(r) >= PERFECT) / n
    avg = mean(x for r in groups.values() for x in r)
    evidence = {
        "groups": n,
        "samples": len(next(iter(groups.values()))),
        "informative_share": round(informative, 3),
        "all_zero_share": round(all_zero, 3),
        "all_perfect_share": round(all_perfect, 3),
        "mean_reward": round(avg, 4),
        "rewards": {str(s): [round(x, 3) for x in r] for s, r in groups.items()},
    }
    problems = []
    if informative < cfg.min_informative:
        problems.append(f"informative groups {informative:.0%} < {cfg.min_informative:.0%}")
    if all_zero > cfg.max_all_zero:
        problems.append(f"all-zero groups {all_zero:.0%} > {cfg.max_all_zero:.0%}")
    if all_perfect > cfg.max_all_perfect:
        problems.append(f"all-perfect groups {all_perfect:.0%} > {cfg.max_all_perfect:.0%}")
    if not cfg.mean_low <= avg <= cfg.mean_high:
        problems.append(f"mean reward {avg:.3f} outside [{cfg.mean_low}, {cfg.mean_high}]")
    evidence["difficulty"] = difficulty(avg, all_zero, all_perfect, informative, cfg)
    if problems:
        return CheckResult.fail("grpo_ready", f"{ADVICE[evidence['difficulty']]}: " + "; ".join(problems), **evidence)
    return CheckResult.ok("grpo_ready", f"{informative:.0%} informative groups, mean reward {avg:.3f}", **evidence)


# What the generator is told to change, by the side of the window the policy fell on.
ADVICE = {
    "too_hard": "too hard for the policy that will train on it (make it easier: give more facts up front in the opening, "
    "fewer steps per task, fewer distractors, partial credit for the capability's first step)",
    "too_easy": "too easy for the policy that will train on it (make it harder: more cases where the capability changes "
    "the right action, more steps or distractors, less said up front)",
    "flat": "rewards do not vary within groups (the same seed gives every sample the same reward: reward the capability's "
    "decision in finer steps)",
    "ok": "inside the window",
}


def difficulty(avg: float, all_zero: float, all_perfect: float, informative: float, cfg: GRPOReadinessConfig) -> str:
    """Which side of the calibration window the policy is on: too_hard, too_easy, flat (no spread) or ok."""
    if avg < cfg.mean_low or all_zero > cfg.max_all_zero:
        return "too_hard"
    if avg > cfg.mean_high or all_perfect > cfg.max_all_perfect:
        return "too_easy"
    return "flat" if informative < cfg.min_informative else "ok"
