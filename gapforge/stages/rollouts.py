"""`collect_rollouts`: the run's task split (agents.analysis.split), then the base policy on the target's tasks
(agents.rollouts.collect; held-out tasks once: `collect_plan`), every episode stored by this process; with
executor.kind ray the episodes are played on Ray actors (`gapforge.executor_wiring.episode_player`). Infrastructure
failures stop the stage (IncompleteStage, exit 3), as does an env whose code failed more than
`rollouts.max_env_failure_share` of the episodes (EnvFailureShare); episodes past `rollouts.episode_timeout_s` in
the env's code are left out with a warning and the stage goes on (a run that hangs on one task still finishes).

Also the run's target record, shared with `gapforge rollouts collect` and `gapforge run --resume`: a run stores its
env's spec and fingerprint (envs.target_check) when it first collects, and refuses to go on when the env's tools or
task set changed since (a changed source file of a user's class only warns) unless the change is allowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gapforge.agents.config import episode_limit_s
from gapforge.config import GapforgeConfig
from gapforge.envs.errors import EnvError
from gapforge.envs.protocol import user_tokens
from gapforge.envs.target_check import TargetFingerprint
from gapforge.executor_wiring import episode_player
from gapforge.graph.context import Cost, RolloutsDone
from gapforge.wiring import make_target_env_factory

if TYPE_CHECKING:
    from gapforge.stages import RunStages
    from gapforge.store import Store


async def collect_rollouts(sc: RunStages, run_id: str) -> RolloutsDone:
    cfg = sc.cfg
    env_name = cfg.rollouts.env
    probe, make_env = make_target_env_factory(cfg, env_name)
    try:
        for warning in check_run_target(sc.store, run_id, target_record(probe, env_name), allow_change=False):
            sc.progress("collect_rollouts", f"warning: {warning}")
        tasks = list(cfg.rollouts.tasks or probe.task_ids())
        families = {t: probe.task_family(t) for t in tasks}
        env_turns = env_turn_limit(probe)
    finally:
        probe.close()
    from gapforge.agents.analysis.split import ensure_split
    from gapforge.agents.rollouts import CollectResult

    a = cfg.analysis
    split = await asyncio.to_thread(
        ensure_split, sc.store, run_id, fraction=a.split_fraction, seed=a.seed, target=(env_name, families)
    )
    plan = collect_plan(cfg, run_id, env_name, tasks, env_turns=env_turns, heldout=split.heldout)
    result = CollectResult(planned=0, skipped=0, ran=0)  # filled as episodes are stored (its counts survive a stop)

    def played(done: int, total: int) -> None:  # about 10 lines over the stage, and its last one
        if done == total or done % max(1, total // 10) == 0:
            sc.progress("collect_rollouts", f"{done}/{total} episodes")

    await play_collection(
        cfg,
        sc.store,
        plan,
        pol_cfg=cfg.policy,
        policy=sc.deps.base_policy,
        make_env=make_env,
        families=families,
        result=result,
        on_episode=lambda _ep: played(result.finished, result.planned),
        heartbeat=lambda line: sc.progress("collect_rollouts", line),
    )
    # the env's code did not answer in time: left out (not stored); env errors below the failure share: stored. The
    # stage goes on after both, and stops on infrastructure failures: analysis over a partial sample would be biased
    for warning in (timeouts_warning(plan, result), env_errors_warning(result, f"gapforge run --resume {run_id}")):
        if warning:
            sc.progress("collect_rollouts", f"warning: {warning}")
    if stop := infra_stop(result, where="collect_rollouts: "):  # agents/infra.py
        raise stop
    episodes = await asyncio.to_thread(sc.store.episodes, run_id, env_name)
    new = set(result.episode_ids)  # the user simulator's tokens of the episodes this call played (an LLM user)
    prompt, completion = user_tokens(e.score_info for e in episodes if e.id in new)
    cost = Cost(policy_rollouts=result.ran, prompt_tokens=prompt, completion_tokens=completion)
    return RolloutsDone(len(episodes), sum(1 for e in episodes if e.success), result.ran, cost)


# ---- the collection itself, shared by the graph's collect_rollouts and `gapforge rollouts collect` ----------------


def collect_plan(
    cfg: GapforgeConfig,
    run_id: str,
    env_name: str,
    tasks: list[str],
    *,
    samples: int | None = None,
    temperature: float | None = None,
    pol_cfg: Any = None,
    env_turns: int | None = None,
    heldout: Sequence[str] = (),
) -> Any:
    """The plan of a collection: `rollouts.*` settings (samples unless given), the env's time limit and failure share; a
    resume plays the env's stored `env_error` episodes again (before the run's analysis starts).

    `heldout`: the run's held-out tasks, played `heldout_samples` times each (only their openings are read)."""
    from gapforge.agents.analysis.split import heldout_samples
    from gapforge.agents.rollouts import CollectPlan

    n = cfg.rollouts.samples if samples is None else samples
    once = heldout_samples(cfg.rollouts.user, env_name, n)

    return CollectPlan(
        run_id=run_id,
        env=env_name,
        tasks=tasks,
        samples=n,
        task_samples={t: once for t in heldout if t in tasks},
        concurrency=cfg.rollouts.concurrency,
        max_turns=cfg.rollouts.max_turns,
        temperature=temperature,
        episode_timeout_s=episode_limit_s(cfg.rollouts, pol_cfg or cfg.policy, cfg.llm, env_turns),
        max_env_failure_share=cfg.rollouts.max_env_failure_share,
        replay_env_errors=True,
    )


def env_turn_limit(probe: Any) -> int | None:
    """The env's own turn limit (τ²'s `max_turns`), which the episode loop never cuts below; None when it has none."""
    turns = getattr(probe, "max_turns", None)
    return turns if isinstance(turns, int) and not isinstance(turns, bool) else None


async def play_collection(
    cfg: GapforgeConfig,
    store: Store,
    plan: Any,
    *,
    pol_cfg: Any,
    policy: Any,
    make_env: Any,
    families: dict[str, str],
    result: Any,
    on_episode: Any = None,
    heartbeat: Callable[[str], None] | None = None,
) -> Any:
    """Play `plan` and store every episode: here (executor.kind local, one process), on local worker processes or on Ray
    actors (`episode_player`, which builds the policy `pol_cfg` there); `policy()` makes it here only when needed.
    `heartbeat`, when given, gets `result.heartbeat(...)` every `rollouts.heartbeat_s` while episodes run."""
    from gapforge.agents.rollouts import collect

    async def beat() -> None:
        while True:
            await asyncio.sleep(cfg.rollouts.heartbeat_s)
            heartbeat(result.heartbeat(plan.episode_timeout_s))  # type: ignore[misc]

    beating = asyncio.create_task(beat()) if heartbeat is not None else None
    try:
        async with episode_player(cfg, pol_cfg, make_env) as player:  # None: played in this process
            return await collect(
                plan,
                make_env=make_env,
                policy=policy() if player is None else None,
                sink=store,
                families=families,
                on_episode=on_episode,
                result=result,
                player=player,
            )
    finally:
        if beating is not None:
            beating.cancel()


def timeouts_warning(plan: Any, result: Any) -> str | None:
    """The line for episodes past the plan's time limit in the env's code (left out, not stored), or None."""
    if not result.timeouts:
        return None
    return (
        f"{len(result.timeouts)} episode(s) did not finish within the episode time limit of {plan.episode_timeout_s:g} s "
        f"(rollouts.episode_timeout_s) and were not stored (last: {result.timeouts[-1].error.splitlines()[0]})"
    )


def env_errors_warning(result: Any, resume: str) -> str | None:
    """The line for `env_error` episodes stored below the failure share (the env's own code raised: they read as failures
    but say nothing about the policy), with the first one's task and error, or None."""
    if not result.env_errors:
        return None
    first = result.first_env_error
    detail = f"; first: {first.task_id}#{first.sample}: {first.error.splitlines()[0][:300]}" if first else ""
    return (
        f"{result.env_errors} of {result.planned} episodes ended in env_error (the env's own code raised; they are not the "
        f"model's failures){detail}: fix the env, then `{resume}` plays them again"
    )


def infra_stop(result: Any, *, where: str = "", resume: str | None = None) -> Any:
    """IncompleteStage (exit 3, resumable) when episodes ended in infrastructure failures, else None."""
    from gapforge.agents.errors import IncompleteStage

    if not result.infra_failures:
        return None
    counts = ", ".join(f"{k}={v}" for k, v in result.infra_counts().most_common())
    last = result.infra_failures[-1].error.splitlines()[0] if result.infra_failures[-1].error else "no detail"
    return IncompleteStage(
        f"{where}{len(result.infra_failures)} of {result.planned} episodes ended in infrastructure failures "
        f"({counts}; last: {last}) and were not stored; {result.ran} stored",
        resume=resume,
    )


def target_record(probe: Any, spec: str) -> TargetFingerprint:
    """The fingerprint of a built env (the source file's hash only for a user's class)."""
    from gapforge.envs.registry import is_builtin
    from gapforge.envs.target_check import fingerprint

    return fingerprint(probe, spec, user_class=not is_builtin(spec))


def check_run_target(
    store: Store, run_id: str, now: TargetFingerprint, *, allow_change: bool, record: bool = True
) -> list[str]:
    """Record `now` as the run's target, or check it against the one recorded: changed tools or tasks raise EnvError
    (one line) unless `allow_change`; returns warnings (a changed source, an allowed change). What was recorded
    before a change stays in the run's `target_history`. `record=False`: check only (a caller not yet holding the
    run's lease checks before any work and records under the lease)."""
    from gapforge.envs.target_check import compare

    stored = store.run_target(run_id)
    if stored is None:
        if record:
            store.set_run_target(run_id, now.model_dump())
        return []
    refusal, warnings = compare(stored, now)
    if refusal and not allow_change:
        raise EnvError(
            f"run {run_id}: env '{now.spec}' is not the env it collected: {refusal}; its stored episodes would mix two envs: "
            "start a new run, or pass --allow-env-change to go on anyway"
        )
    if refusal:
        warnings.insert(
            0,
            f"env '{now.spec}': {refusal}; going on as --allow-env-change asks (the old record is kept in the run's target_history)",
        )
    if record and stored != now.model_dump():
        store.set_run_target(
            run_id, now.model_dump(), replaced_because=refusal or "; ".join(warnings) or "recorded again"
        )
    return warnings


def resume_target_check(cfg: GapforgeConfig, store: Store, run_id: str, *, allow_change: bool) -> list[str]:
    """Before a graph run resumes: the env of its stored config against the target it recorded (nothing to check
    before its first collection). EnvError when it changed, unless `allow_change`; returns warnings."""
    if store.run_target(run_id) is None:
        return []
    probe, _ = make_target_env_factory(cfg, cfg.rollouts.env)
    try:
        return check_run_target(store, run_id, target_record(probe, cfg.rollouts.env), allow_change=allow_change)
    finally:
        probe.close()
