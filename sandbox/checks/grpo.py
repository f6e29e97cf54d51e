"""Check 7: GRPO-ready. G seeds x K policy samples at temperature 1.0 must give
informative groups (reward std > 0), few all-zero / all-perfect groups, and a
mean reward inside [mean_low, mean_high]."""

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

    async def run_all() -> list[list[float]]:
        sem = asyncio.Semaphore(concurrency)
        tasks = [[one(s, sem) for _ in range(cfg.samples)] for s in group_seeds]
        flat = await asyncio.gather(*[t for group in tasks for t in group])
        return [list(flat[i * cfg.samples : (i + 1) * cfg.samples]) for i in range(len(group_seeds))]

    groups = run_coroutine(run_all)
    if faults:
        f = faults[0]
        return CheckResult.fail("grpo_ready", f"env {f['kind']} during a policy episode at seed {f['seed']}: {f['error'][:300]}", faults=faults[:5])
    return grade_groups(dict(zip(group_seeds, groups)), cfg)


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
