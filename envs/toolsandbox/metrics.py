"""The paper's ToolSandbox metrics over stored episodes (a run's `toolsandbox[...]` episodes).

`stored_metrics(episodes, excluded_for=...)` groups episodes by env name (e.g.
`toolsandbox`, `toolsandbox:state_dependency`, `toolsandbox?network=stand-in`) and
reports, per env, `paper_metrics`: per category and `all`, scenarios run, perfect
(similarity == 1.0), mean similarity, excluded. A scenario's similarity is its
episode's reward (the mean over samples when a run holds several; "perfect" then
means every sample was perfect). Categories come from each episode's score info
(ToolSandboxEnv records them); excluded scenarios (network="off") are given by the
caller, who can ask the catalogue (`ToolSandboxEnv(...).excluded()`). An env in the
stand-in network mode is marked `comparable_to_live=False` with a note saying why.
Works on anything with `env`, `task_id`, `reward` and `score_info` (store rows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from gapforge.envs.toolsandbox.plan import CategoryMetrics, paper_metrics

ENV_PREFIX = "toolsandbox"
STAND_IN_NOTE = (
    "RapidAPI answers are a stand-in written from the scenarios' milestones (worker/standin_rapidapi.json), "
    "neither live nor recorded: these scores are not comparable to live RapidAPI runs"
)


class StoredEpisode(Protocol):
    env: str
    task_id: str
    reward: float
    score_info: dict[str, Any]


class EnvMetrics(BaseModel):
    """One toolsandbox env's metrics in a run."""

    model_config = ConfigDict(extra="forbid")

    env: str
    network: str
    comparable_to_live: bool
    note: str | None = None
    episodes: int
    uncategorised: list[str]
    categories: dict[str, CategoryMetrics]


def is_toolsandbox(env: str) -> bool:
    return env == ENV_PREFIX or env.startswith((ENV_PREFIX + ":", ENV_PREFIX + "?"))


def network_of(env: str) -> str:
    """ "stand-in" for `...?network=stand-in`, else "off"."""
    return "stand-in" if env.endswith("?network=stand-in") else "off"


def stored_metrics(
    episodes: Iterable[StoredEpisode],
    excluded_for: Callable[[str], Mapping[str, list[str]]] | None = None,
    categories_of: Callable[[str], Mapping[str, list[str]]] | None = None,
) -> list[EnvMetrics]:
    """Per toolsandbox env in `episodes`: the paper's metrics.

    excluded_for(env)  -> scenario -> why it was left out (e.g. its network tools);
    categories_of(env) -> scenario -> categories, for scenarios whose episodes carry none
                          (an episode that failed before scoring) and for excluded ones.
    """
    rewards: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cats: dict[str, dict[str, list[str]]] = defaultdict(dict)
    count: dict[str, int] = defaultdict(int)
    for ep in episodes:
        if not is_toolsandbox(ep.env):
            continue
        count[ep.env] += 1
        rewards[ep.env][ep.task_id].append(float(ep.reward))
        found = (ep.score_info or {}).get("categories")
        if isinstance(found, list):
            cats[ep.env][ep.task_id] = [str(c) for c in found]
    out = []
    for env in sorted(rewards):
        excluded = dict(excluded_for(env)) if excluded_for else {}
        known = dict(categories_of(env)) if categories_of else {}
        categories = {**known, **cats[env]}
        similarity = {task: sum(vals) / len(vals) for task, vals in rewards[env].items()}
        missing = sorted(t for t in similarity if t not in categories)
        stand_in = network_of(env) == "stand-in"
        out.append(
            EnvMetrics(
                env=env,
                network=network_of(env),
                comparable_to_live=not stand_in,
                note=STAND_IN_NOTE if stand_in else None,
                episodes=count[env],
                uncategorised=missing,
                categories=paper_metrics(similarity, categories, excluded),
            )
        )
    return out
