"""Runs (the `gapforge runs` table, live while a run works), one run (timeline, config, capabilities, evaluation
summary) and its checkpoints (fork commands, review state)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gapforge.evaluation.summary import headline
from gapforge.graph.inspect import FORKABLE_NEXT
from gapforge.graph.state import STAGES
from gapforge.store.errors import NoStore
from gapforge.ui import links, svg
from gapforge.ui.render import render, sources
from gapforge.ui.sources import RunSnapshot

if TYPE_CHECKING:
    from gapforge.store.reader import StoreReader

router = APIRouter()
RUN_KINDS = ("trace", "demo")  # graph runs (gapforge.run_session.RUN_KINDS)
FINISHED = ("done", "skipped", "unavailable", "failed")
BRANCH = ("synthesize", "validate", "train")  # run per capability, inside the `capability` step
RUN_STEPS = tuple(s for s in STAGES if s not in BRANCH[1:])  # what the progress bar counts; "synthesize": all branches
BRANCH_DONE = ("trained", "failed", "unavailable", "unsynthesized", "dropped")
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 5x faster than the pure-Python one


def progress(snap: RunSnapshot) -> dict[str, Any]:
    """What a run's row shows: stage, steps finished of all (the per-capability branches count as one),
    capabilities retained / trained, pass rates."""
    v = snap.values
    stages, caps, ev = v.get("stages") or {}, v.get("capabilities") or {}, v.get("evaluation") or {}
    retained = list(v.get("retained") or [])
    branches = sum(1 for c in retained if (caps.get(c) or {}).get("status") in BRANCH_DONE)
    branches_over = (
        "build_router" in stages
        or (retained and branches == len(retained))
        or (stages.get("select") == "done" and not retained)
    )
    finished = sum(1 for s in RUN_STEPS if stages.get(s) in FINISHED) + bool(branches_over)
    ended = bool(v) and not snap.next
    return {
        "stage": v.get("stage") or "–",
        "next": ", ".join(snap.next) or ("end" if v else "–"),
        "finished": len(RUN_STEPS) if ended else min(finished, len(RUN_STEPS)),
        "total": len(RUN_STEPS),
        "branches": f"{branches}/{len(retained)}" if retained else "",
        "stages": stages,
        "retained": len(v.get("retained") or []),
        "trained": sum(1 for c in caps.values() if c.get("status") == "trained"),
        "base": (ev.get("base") or {}).get("pass_rate"),
        "trace": (ev.get("trace_routed") or {}).get("pass_rate"),
        "paused": snap.paused_for_review,
    }


async def _runs(request: Request, template: str, p: int) -> HTMLResponse:
    src, p = sources(request), max(p, 0)
    page = src.store.runs_page(RUN_KINDS, offset=p * src.settings.page_size, limit=src.settings.page_size)
    rows = [{"run": r, **progress(await src.snapshot(r.id))} for r in page.rows]
    live = any(r["run"].status == "running" for r in rows)
    return render(request, template, rows=rows, page=page, p=p, live=live)


@router.get("/", response_class=HTMLResponse)
async def runs(request: Request, p: int = 0) -> HTMLResponse:
    try:
        return await _runs(request, "runs.html", p)
    except NoStore as e:
        return render(request, "nostore.html", message=str(e))


@router.get("/runs/rows", response_class=HTMLResponse)
async def runs_rows(request: Request, p: int = 0) -> HTMLResponse:
    """The runs table's body alone (htmx polls it while a run is running)."""
    return await _runs(request, "_runs_rows.html", p)


def _capability_rows(store: StoreReader, run_id: str, snap: RunSnapshot) -> list[dict[str, Any]]:
    """One row per capability of the dictionary: the analysis summary, the graph's row, env attempts, adapters."""
    summaries = {s.capability: s for s in store.capability_summaries(run_id)}
    state = snap.values.get("capabilities") or {}
    attempts: dict[str, list[Any]] = {}
    adapters: dict[str, list[Any]] = {}
    for a in store.env_attempts(run_id):
        attempts.setdefault(a.capability, []).append(a)
    for a in store.adapters(run_id):
        adapters.setdefault(a.capability or "", []).append(a)
    accepted = {name: next((a for a in reversed(tries) if a.passed), None) for name, tries in attempts.items()}
    return [
        dict(cap=c, summary=summaries.get(c.name), state=state.get(c.name) or {}, adapters=adapters.get(c.name, []))
        | dict(attempts=attempts.get(c.name, []), accepted=accepted.get(c.name))
        for c in store.capabilities(run_id)
    ]


def _gap_plot(run_id: str, rows: list[dict[str, Any]]) -> Any:
    points, delta, rho = [], None, None
    for r in rows:
        s = r["summary"]
        if s is None or s.gap is None or s.coverage is None:
            continue
        delta, rho = s.details.get("delta", delta), s.details.get("rho", rho)
        href, css = links.capability(run_id, s.capability), "kept" if s.retained else "dropped"
        p = (s.capability, s.coverage, s.gap, s.coverage_low, s.coverage_high, s.gap_low, s.gap_high, href, css)
        points.append(svg.Point(*p))
    if not points:
        return None
    return svg.scatter(
        points,
        x_label="coverage (LACKING failures / failures)",
        y_label="gap Δ = ER- − ER+",
        x_line=rho,
        y_line=delta,
        title="gap vs coverage",
    )


def evaluation_rows(store: StoreReader, run_id: str) -> tuple[list[Any], Any, list[str]]:
    rows = store.evaluations(run_id)
    evals = sorted((e for e in rows if e.name.startswith("eval:")), key=lambda e: (e.name != "eval:base", e.name))
    router_row = next((e for e in rows if e.name == "router_accuracy"), None)
    metrics = {e.name.removeprefix("eval:"): e.metrics for e in evals}
    return evals, router_row, headline(metrics) if "base" in metrics else []


def _cost(values: dict[str, Any], stored: dict[str, Any]) -> Any:
    """The run's cost per stage and per capability in dollars, at the prices of its stored config (gapforge.pricing)."""
    from gapforge.pricing import cost_view, stored_pricing

    return cost_view(values, *stored_pricing(stored))


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: str) -> HTMLResponse:
    src = sources(request)
    store = src.store
    run = store.get_run(run_id)
    snap = await src.snapshot(run_id)
    rows = _capability_rows(store, run_id, snap)
    evals, router_row, lines = evaluation_rows(store, run_id)
    record = dict(run.config)
    return render(
        request,
        "run.html",
        cost=_cost(snap.values, record.get("config", record)),
        run=run,
        snap=snap,
        prog=progress(snap),
        history=await src.history(run_id),
        rows=rows,
        plot=_gap_plot(run_id, rows),
        evals=evals,
        router_row=router_row,
        headline=lines,
        config_yaml=yaml.dump(record.get("config", record), Dumper=DUMPER, sort_keys=False, allow_unicode=True),
        graph_options=record.get("graph"),
        command=record.get("command"),
        outcomes=store.episode_outcomes(run_id),
        holder=store.lease_holder(run_id),
        children=store.child_runs(run_id),
    )


@router.get("/runs/{run_id}/live", response_class=HTMLResponse)
async def run_live(request: Request, run_id: str) -> HTMLResponse:
    """The run page's status block alone (htmx polls it while the run is running)."""
    src = sources(request)
    run = src.store.get_run(run_id)
    snap = await src.snapshot(run_id)
    return render(
        request, "_run_status.html", run=run, snap=snap, prog=progress(snap), holder=src.store.lease_holder(run_id)
    )


@router.get("/runs/{run_id}/checkpoints", response_class=HTMLResponse)
async def checkpoints(request: Request, run_id: str) -> HTMLResponse:
    src = sources(request)
    run = src.store.get_run(run_id)
    snap = await src.snapshot(run_id)
    entries = await src.history(run_id)
    forkable = {e.checkpoint_id for e in entries if e.next and set(e.next) <= FORKABLE_NEXT}
    return render(
        request,
        "checkpoints.html",
        run=run,
        snap=snap,
        entries=entries,
        forkable=forkable,
        forkable_next=sorted(FORKABLE_NEXT),
    )
