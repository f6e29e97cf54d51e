"""The TRACE paper's ToolSandbox metrics: `paper_metrics`, per category and `all`, scenarios run, perfect
(similarity == 1.0), mean similarity and excluded (network); `stored_metrics(episodes, excluded_for=...)`, those per
toolsandbox env name in a run's stored episodes (`toolsandbox`, `toolsandbox:state_dependency`, `...?network=stand-in`).

A scenario's similarity is its episode's reward (the mean over samples when a run holds several; "perfect" then means
every sample was). Categories come from each episode's score info (ToolSandboxEnv records them); excluded scenarios
(network="off") come from the caller (`ToolSandboxEnv(...).excluded()`). A stand-in network env is marked
`comparable_to_live=False` with a note saying why. Works on anything with `env`, `task_id`, `reward`, `score_info`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

ALL = "all"
ENV_PREFIX = "toolsandbox"
STAND_IN_NOTE = (
    "RapidAPI answers are a stand-in written from the scenarios' milestones (worker/standin_rapidapi.json), "
    "neither live nor recorded: these scores are not comparable to live RapidAPI runs"
)


class CategoryMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: int
    perfect: int
    mean_similarity: float
    excluded: int = 0


def paper_metrics(
    similarity: Mapping[str, float],
    categories: Mapping[str, list[str]],
    excluded: Mapping[str, list[str]] | None = None,
) -> dict[str, CategoryMetrics]:
    """Per category (and "all"): scenarios run, perfect (similarity == 1.0), mean similarity, excluded.

    similarity: scenario -> ToolSandbox similarity (the episode's reward);
    categories: scenario -> its categories (run and excluded scenarios);
    excluded:   scenario -> why (e.g. its network tools), counted, not scored.
    """
    scores: dict[str, list[float]] = defaultdict(list)
    left_out: dict[str, int] = defaultdict(int)
    for name, value in similarity.items():
        for cat in [ALL, *categories.get(name, [])]:
            scores[cat].append(float(value))
    for name in excluded or {}:
        for cat in [ALL, *categories.get(name, [])]:
            left_out[cat] += 1
    out = {}
    for cat in sorted(set(scores) | set(left_out), key=lambda c: (c != ALL, c)):
        vals = scores.get(cat, [])
        mean = sum(vals) / len(vals) if vals else 0.0
        out[cat] = CategoryMetrics(
            run=len(vals), perfect=sum(v == 1.0 for v in vals), mean_similarity=mean, excluded=left_out.get(cat, 0)
        )
    return out


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
