"""`gapforge env check SPEC`: a target env's reward checked with scripted policies before any rollout is paid for.

On every task (or `--tasks`), each policy of gapforge/check_policies.py (`do_nothing`, `random_tool`,
`claim_success`; `gold` with a gold file, on the tasks it covers) plays one episode through the collection's episode
loop (`agents.rollouts.play_episode`: a fresh env per episode, closed after, a collection's episode time limit); a gold
episode ends after its script's last turn and is scored. The three degenerate policies should score at most `floor`
and never succeed on a task, except on a task whose gold script calls no tool (doing nothing is its right answer:
shown, not held to the floor); gold should reach `GOLD_CEILING` and succeed on every task it covers. An episode the
env failed (`env_error`, a timeout, an infrastructure end) is no score: it is reported with its error line and its
row is flagged. Nothing here prints.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gapforge.agents.config import PolicyConfig, episode_limit_s
from gapforge.agents.episode import EpisodeRecord
from gapforge.agents.rollouts import play_episode
from gapforge.check_policies import DEGENERATE, GoldTurn, calls_no_tool, load_gold, make_policy
from gapforge.config import GapforgeConfig
from gapforge.envs.errors import EnvError
from gapforge.errors import error_line
from gapforge.rollouts_run import parse_tasks

DEFAULT_FLOOR = 0.1
GOLD_CEILING = 0.99


class Outcome(BaseModel):
    """One episode of one policy: its score, or (`reward` None) the env's failure and its error line."""

    task: str
    reward: float | None
    success: bool = False
    termination: str
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.reward is not None


class PolicyRow(BaseModel):
    """One policy's episodes, what it should score, and whether it does (the tasks that broke it)."""

    policy: str
    should_score: str
    episodes: int
    mean_reward: float | None
    success_rate: float | None
    verdict: Literal["ok", "FLAGGED"]
    broken: list[Outcome] = Field(default_factory=list, description="scored episodes outside the expectation")
    env_failures: list[Outcome] = Field(default_factory=list, description="episodes the env failed: no score")
    exempt: list[Outcome] = Field(
        default_factory=list, description="above the floor on a task whose gold calls no tool"
    )
    no_gold: list[str] = Field(default_factory=list, description="gold row: tasks without a gold script")


class EnvCheckReport(BaseModel):
    """What `gapforge env check` found: one row per policy (the CLI renders it; `--json` writes it)."""

    env: str
    tasks: list[str]
    floor: float
    gold_ceiling: float = GOLD_CEILING
    gold_file: str | None = None
    episode_time_limit_s: float
    seconds: float
    rows: list[PolicyRow]

    @property
    def passed(self) -> bool:
        return all(r.verdict == "ok" for r in self.rows)


def check_target(
    cfg: GapforgeConfig,
    spec: str,
    *,
    gold_file: Path | None = None,
    tasks: str | None = None,
    floor: float = DEFAULT_FLOOR,
) -> EnvCheckReport:
    """Build the target as every command does (gapforge.wiring), check the gold file, play every policy on every task."""
    from gapforge.stages.rollouts import env_turn_limit
    from gapforge.wiring import make_target_env_factory

    probe, make_env = make_target_env_factory(cfg, spec)
    try:
        known = probe.task_ids()
        tool_names = [t["function"]["name"] for t in probe.tools()]
        env_turns = env_turn_limit(probe)
    finally:
        probe.close()
    chosen = parse_tasks(tasks, known)
    gold = load_gold(gold_file, known, tool_names) if gold_file is not None else None
    limit = episode_limit_s(
        cfg.rollouts, PolicyConfig(kind="scripted"), cfg.llm, env_turns
    )  # scripted turns are instant
    t0 = time.perf_counter()
    played = asyncio.run(
        play_all(
            make_env,
            spec,
            chosen,
            gold,
            max_turns=cfg.rollouts.max_turns,
            timeout_s=limit,
            concurrency=cfg.rollouts.concurrency,
        )
    )
    rows = [judge(kind, played[kind], floor, gold, chosen) for kind in played]
    return EnvCheckReport(
        env=spec,
        tasks=chosen,
        floor=floor,
        gold_file=str(gold_file) if gold_file else None,
        episode_time_limit_s=limit,
        seconds=round(time.perf_counter() - t0, 2),
        rows=rows,
    )


async def play_all(
    make_env: Callable[[], Any],
    env_name: str,
    tasks: list[str],
    gold: dict[str, list[GoldTurn]] | None,
    *,
    max_turns: int,
    timeout_s: float | None,
    concurrency: int,
) -> dict[str, list[Outcome]]:
    """Every policy on every task (gold: on the tasks it covers), `concurrency` episodes at a time; outcomes in task order."""
    plan = [(kind, t) for kind in DEGENERATE for t in tasks]
    if gold is not None:
        plan += [("gold", t) for t in tasks if t in gold]
    slots = asyncio.Semaphore(concurrency)

    async def one(kind: str, task: str) -> Outcome:
        turns = gold[task] if kind == "gold" and gold else None
        async with slots:
            try:
                ep = await play_episode(
                    make_policy(kind, task, turns),
                    make_env,
                    task,
                    0,
                    max_turns=len(turns) if turns else max_turns,
                    temperature=None,
                    executor=None,
                    timeout_s=timeout_s,
                    env_name=env_name,
                )
            except EnvError as e:  # reset refused a task the env itself lists: the env's failure on this task
                return Outcome(
                    task=task, reward=None, termination="env_error", error=f"env.reset failed: {error_line(e)}"
                )
        return outcome(task, ep)

    results = await asyncio.gather(*(one(kind, t) for kind, t in plan))
    out: dict[str, list[Outcome]] = {kind: [] for kind in [*DEGENERATE, *(["gold"] if gold is not None else [])]}
    for (kind, _), result in zip(plan, results):
        out[kind].append(result)
    return out


def outcome(task: str, ep: EpisodeRecord) -> Outcome:
    """An episode as a score, or as the failure it was (the env's error, a timeout, an infrastructure end): never 0."""
    if ep.env_failure or not ep.final:
        return Outcome(
            task=task, reward=None, termination=ep.termination, error=(ep.error or ep.termination).splitlines()[0]
        )
    return Outcome(task=task, reward=ep.reward, success=ep.success, termination=ep.termination)


def judge(
    kind: str, outcomes: list[Outcome], floor: float, gold: dict[str, list[GoldTurn]] | None, tasks: list[str]
) -> PolicyRow:
    """The row of one policy: mean reward and success rate over its scored episodes, the tasks that broke its expectation."""
    scored = [o for o in outcomes if o.scored]
    failures = [o for o in outcomes if not o.scored]
    if kind == "gold":
        should = f">= {GOLD_CEILING:g}, success"
        broken = [o for o in scored if (o.reward or 0.0) < GOLD_CEILING or not o.success]
        exempt: list[Outcome] = []
    else:
        free = {
            t for t in tasks if gold is not None and t in gold and calls_no_tool(gold[t])
        }  # doing nothing is right there
        should = f"<= {floor:g}, no success" + (f" ({len(free)} exempt)" if free else "")
        above = [o for o in scored if (o.reward or 0.0) > floor or o.success]
        exempt = [o for o in above if o.task in free]
        broken = [o for o in above if o.task not in free]
    return PolicyRow(
        policy=kind,
        should_score=should,
        episodes=len(outcomes),
        mean_reward=round(sum(o.reward or 0.0 for o in scored) / len(scored), 4) if scored else None,
        success_rate=round(sum(o.success for o in scored) / len(scored), 4) if scored else None,
        verdict="FLAGGED" if broken or failures else "ok",
        broken=broken,
        env_failures=failures,
        exempt=exempt,
        no_gold=[t for t in tasks if gold is not None and t not in gold] if kind == "gold" else [],
    )
