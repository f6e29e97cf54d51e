"""Check 7: GRPO-ready. G seeds x K policy samples at temperature 1.0 must give
informative groups (reward std > 0), few all-zero / all-perfect groups, and a
mean reward inside [mean_low, mean_high].

Groups run in waves (concurrency // K groups at a time); with `early_exit` the check
stops as soon as the all-zero, all-perfect or uninformative groups seen already exceed
their limit, so a hopeless env does not spend the whole G x K budget. The evidence
records the policy rollouts spent (`rollouts`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from statistics import mean, pstdev
from typing import Any, TypeVar

from envs.protocol import PolicyModel
from sandbox.checks.settings import GRPOReadinessConfig
from sandbox.checks.probe import OpenEnv, ValidatedEnv
from sandbox.checks.report import CheckResult
from sandbox.errors import EnvCodeError, SandboxError

# (policy, env, seed, temperature) -> the episode: a reward, or an object with `.reward` and
# optionally `.termination` / `.error` (agents.policy.Episode). The composition root passes
# agents.policy.run_episode adapted to this signature; sandbox/ never imports agents/.
EpisodeRunner = Callable[[PolicyModel, ValidatedEnv, int, float], Awaitable[Any]]
PERFECT = 0.99
T = TypeVar("T")


def run_coroutine(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, also when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(make())  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=worker, name="grpo-ready-check")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_grpo_ready(
    open_env: OpenEnv,
    seeds: list[int],
    policy: PolicyModel | None,
    run_episode: EpisodeRunner | None,
    cfg: GRPOReadinessConfig,
    *,
    concurrency: int = 4,
    early_exit: bool = True,
) -> CheckResult:
    if policy is None or run_episode is None:
        return CheckResult.skip("grpo_ready", "no policy configured (policy.kind endpoint|local): GRPO readiness not checked")
    group_seeds = (seeds + list(range(len(seeds), cfg.groups)))[: cfg.groups]
    faults: list[dict[str, Any]] = []

    async def one(seed: int, sem: asyncio.Semaphore) -> float:
        async with sem:
            env: ValidatedEnv | None = None
            try:
                env = open_env()
                episode = await run_episode(policy, env, seed, 1.0)
                if getattr(episode, "termination", None) == "env_error":
                    faults.append({"seed": seed, "kind": "env_error", "error": str(getattr(episode, "error", ""))[:1500]})
                return float(getattr(episode, "reward", episode))
            except SandboxError:
                raise
            except EnvCodeError as e:
                faults.append({"seed": seed, "kind": e.kind, "error": e.detail[:1500]})
            except Exception as e:  # noqa: BLE001 - an env failing mid-episode is data
                faults.append({"seed": seed, "kind": "exception", "error": f"{type(e).__name__}: {e}"[:1500]})
            finally:
                if env is not None:
                    try:
                        env.close()
                    except Exception:  # noqa: BLE001, S110 - a broken env's close() must not end validation
                        pass
            return 0.0

    async def run_all() -> dict[int, list[float]]:
        """Groups in waves; stop early once the verdict can no longer become a pass."""
        sem = asyncio.Semaphore(concurrency)
        done: dict[int, list[float]] = {}
        wave = max(1, concurrency // cfg.samples) if early_exit else len(group_seeds)
        for start in range(0, len(group_seeds), wave):
            seeds_now = group_seeds[start : start + wave]
            flat = await asyncio.gather(*[one(s, sem) for s in seeds_now for _ in range(cfg.samples)])
            for i, s in enumerate(seeds_now):
                done[s] = list(flat[i * cfg.samples : (i + 1) * cfg.samples])
            if faults or (early_exit and bound_to_fail(done, len(group_seeds), cfg)):
                break
        return done

    groups = run_coroutine(run_all)
    rollouts = sum(len(r) for r in groups.values())
    if faults:
        f = faults[0]
        return CheckResult.fail("grpo_ready", f"env {f['kind']} during a policy episode at seed {f['seed']}: {f['error'][:300]}",
                                faults=faults[:5], rollouts=rollouts)
    result = grade_groups(groups, cfg)
    result.evidence["rollouts"] = rollouts
    if len(groups) < len(group_seeds):
        result.evidence["stopped_early"] = f"after {len(groups)} of {len(group_seeds)} groups: the verdict could no longer become a pass"
        result.summary += f" (stopped early after {len(groups)}/{len(group_seeds)} groups)"
    return result


def bound_to_fail(done: dict[int, list[float]], total: int, cfg: GRPOReadinessConfig) -> bool:
    """True when the groups seen so far already exceed a limit whatever the remaining groups give."""
    zero = sum(1 for r in done.values() if max(r) <= 1e-9)
    perfect = sum(1 for r in done.values() if min(r) >= PERFECT)
    flat = sum(1 for r in done.values() if pstdev(r) <= 1e-9)
    return zero > cfg.max_all_zero * total or perfect > cfg.max_all_perfect * total or flat > (1 - cfg.min_informative) * total


def grade_groups(groups: dict[int, list[float]], cfg: GRPOReadinessConfig) -> CheckResult:
    """The verdict over a {seed: [K rewards]} matrix."""
    n = len(groups)
    informative = sum(1 for r in groups.values() if pstdev(r) > 1e-9) / n
    all_zero = sum(1 for r in groups.values() if max(r) <= 1e-9) / n
    all_perfect = sum(1 for r in groups.values() if min(r) >= PERFECT) / n
    avg = mean(x for r in groups.values() for x in r)
    evidence = {
        "groups": n, "samples": len(next(iter(groups.values()))), "informative_share": round(informative, 3),
        "all_zero_share": round(all_zero, 3), "all_perfect_share": round(all_perfect, 3), "mean_reward": round(avg, 4),
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
    if problems:
        return CheckResult.fail("grpo_ready", "; ".join(problems), **evidence)
    return CheckResult.ok("grpo_ready", f"{informative:.0%} informative groups, mean reward {avg:.3f}", **evidence)
