"""A capability (its LACKING / PRESENT / NA episodes with the R votes and the analyst's evidence, per-pass statistics,
κ, links to env attempts and adapters), a run's episodes (filtered, paged) and one episode (the trajectory as a
conversation, reward breakdown, per-step info, why it ended and whom that blames, what the analyst said about it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gapforge.store.rows import LABEL_VALUES
from gapforge.ui import links
from gapforge.ui.render import NotFound, render, sources

router = APIRouter()


def _page(request: Request, p: int) -> tuple[int, int]:
    size = sources(request).settings.page_size
    return max(p, 0) * size, size


@router.get("/runs/{run_id}/capability", response_class=HTMLResponse)
async def capability(request: Request, run_id: str, name: str, label: str = "LACKING", p: int = 0) -> HTMLResponse:
    store = sources(request).store
    run = store.get_run(run_id)
    cap = store.get_capability(run_id, name)
    if cap is None:
        known = ", ".join(c.name for c in store.capabilities(run_id)) or "none yet"
        raise NotFound(f"run {run_id} has no capability {name!r} (its capabilities: {known})")
    if label not in LABEL_VALUES:
        raise NotFound(f"label {label!r} is not one of {', '.join(LABEL_VALUES)}")
    offset, size = _page(request, p)
    summary = next((s for s in store.capability_summaries(run_id) if s.capability == name), None)
    return render(
        request,
        "capability.html",
        run=run,
        cap=cap,
        summary=summary,
        stats=store.capability_stats(run_id, name),
        counts=store.label_counts(run_id, name),
        label=label,
        labels=LABEL_VALUES,
        page=store.labeled_episodes(run_id, name, label, offset=offset, limit=size),
        attempts=store.env_attempts(run_id, name),
        adapters=[a for a in store.adapters(run_id) if a.capability == name],
        p=max(p, 0),
        page_url=links.capability(run_id, name, label),
    )


@router.get("/runs/{run_id}/episodes", response_class=HTMLResponse)
async def episodes(
    request: Request,
    run_id: str,
    outcome: str | None = None,
    family: str | None = None,
    task: str | None = None,
    p: int = 0,
) -> HTMLResponse:
    store = sources(request).store
    run = store.get_run(run_id)
    offset, size = _page(request, p)
    success = {"success": True, "failure": False}.get(outcome or "")
    page = store.episodes_page(
        run_id, success=success, family=family or None, task_id=task or None, offset=offset, limit=size
    )
    return render(
        request,
        "episodes.html",
        run=run,
        page=page,
        outcome=outcome,
        family=family,
        task=task,
        p=max(p, 0),
        parent=run_id.split(".eval.")[0] if ".eval." in run_id else None,
        page_url=links.episodes(run_id, success=success, family=family, task=task),
    )


def _turns(messages: list[Any]) -> list[dict[str, Any]]:
    """Messages as conversation turns; tool results keep the name of the call they answer."""
    names: dict[str, str] = {}
    out = []
    for i, m in enumerate(messages):
        m = m if isinstance(m, dict) else {"role": "?", "content": str(m)}
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id"):
                names[str(call["id"])] = str(call.get("name", ""))
        turn = dict(index=i, role=str(m.get("role", "?")), content=m.get("content"), calls=m.get("tool_calls") or [])
        tool = m.get("name") or names.get(str(m.get("tool_call_id") or ""), "")
        out.append(turn | {"tool": tool, "call_id": m.get("tool_call_id")})
    return out


@router.get("/episodes/{episode_id}", response_class=HTMLResponse)
async def episode(request: Request, episode_id: int) -> HTMLResponse:
    store = sources(request).store
    ep = store.get_episode(episode_id)
    votes: dict[str, list[Any]] = {}
    for lab in store.episode_labels(episode_id):
        votes.setdefault(lab.capability, []).append(lab)
    return render(request, "episode.html", ep=ep, turns=_turns(ep.messages), votes=votes)
