"""Every URL of the viewer, built in one place (path parts and query values quoted).

Run ids and numeric ids go in the path; names that an LLM chose (capabilities, adapters) go in the query string, so no
name can change which route answers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode


def _q(**params: Any) -> str:
    kept = {k: v for k, v in params.items() if v is not None and v != ""}
    return "?" + urlencode(kept) if kept else ""


def runs(p: int | None = None) -> str:
    return "/" + _q(p=p or None)


def run(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def checkpoints(run_id: str) -> str:
    return run(run_id) + "/checkpoints"


def capability(run_id: str, name: str, label: str | None = None, p: int | None = None) -> str:
    return run(run_id) + "/capability" + _q(name=name, label=label, p=p or None)


def episodes(
    run_id: str,
    *,
    success: bool | None = None,
    family: str | None = None,
    task: str | None = None,
    p: int | None = None,
) -> str:
    outcome = None if success is None else ("success" if success else "failure")
    return run(run_id) + "/episodes" + _q(outcome=outcome, family=family, task=task, p=p or None)


def episode(episode_id: int) -> str:
    return f"/episodes/{int(episode_id)}"


def env_attempt(env_id: int) -> str:
    return f"/envs/{int(env_id)}"


def adapter(run_id: str, name: str) -> str:
    return run(run_id) + "/adapter" + _q(name=name)


def evaluation(run_id: str) -> str:
    return run(run_id) + "/evaluation"


def with_page(url: str, p: int) -> str:
    """The same list URL on page p (its other query parameters kept)."""
    base, _, query = url.partition("?")
    params = [kv for kv in query.split("&") if kv and not kv.startswith("p=")]
    if p:
        params.append(f"p={int(p)}")
    return base + ("?" + "&".join(params) if params else "")


LINKS = {f"{f.__name__}_url": f for f in (runs, run, checkpoints, capability, episodes, episode, adapter, evaluation)}
LINKS |= {"env_url": env_attempt, "with_page": with_page}
