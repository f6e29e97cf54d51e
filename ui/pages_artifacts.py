"""What a run built: an env attempt (verdict, every self-test check with its evidence, the reviewer's notes, the code,
the diff to the previous attempt), an adapter (held-out curve, per-step GRPO log, metadata, the checkpoint kept) and the
evaluation (pass rates with CIs, paired differences as a forest plot, per family, routing, the router's confusion
matrix; every number links to its episodes)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gapforge.ui import code, links, svg
from gapforge.ui.pages_runs import evaluation_rows
from gapforge.ui.render import NotFound, render, sources

router = APIRouter()


def _checks(report: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The self-test's checks (report.report.checks) and the LLM review among them."""
    inner = report.get("report") if isinstance(report.get("report"), dict) else report
    checks = [c for c in (inner.get("checks") or []) if isinstance(c, dict)]
    review = next((c for c in checks if c.get("name") == "llm_review"), None)
    return checks, review


@router.get("/envs/{env_id}", response_class=HTMLResponse)
async def env_attempt(request: Request, env_id: int) -> HTMLResponse:
    store = sources(request).store
    env = store.get_synthetic_env(env_id)
    validation = store.get_validation(env_id)
    report = dict(validation.report) if validation is not None else {}
    checks, review = _checks(report)
    prev_id = store.previous_attempt(env.run_id, env.capability, env.attempt)
    diff = None
    if prev_id is not None:
        prev = store.get_synthetic_env(prev_id)
        diff = (prev, *code.diff(prev.code, env.code, f"attempt-{prev.attempt}.py", f"attempt-{env.attempt}.py"))
    return render(
        request,
        "env_attempt.html",
        env=env,
        validation=validation,
        report=report,
        checks=checks,
        review=review,
        verdict=report.get("verdict"),
        code_html=code.python(env.code),
        diff=diff,
        siblings=store.env_attempts(env.run_id, env.capability),
        lines=env.code.count("\n") + 1,
        adapters=[a for a in store.adapters(env.run_id) if a.capability == env.capability]
        if validation and validation.passed
        else [],
    )


def _curve_plot(curve: list[dict[str, Any]]) -> Any:
    pts = [(float(c["step"]), float(c["reward"])) for c in curve if isinstance(c, dict) and c.get("reward") is not None]
    if not pts:
        return None
    return svg.lines(
        [("held-out reward", pts)], x_label="training step", y_label="held-out synthetic reward", title="held-out curve"
    )


def _steps_plot(steps: list[dict[str, Any]]) -> Any:
    rows = [s for s in steps if s.get("step") is not None]
    if not rows:
        return None
    series = [(name, [(float(s["step"]), float(s.get(key) or 0.0)) for s in rows]) for name, key in _STEP_SERIES]
    return svg.lines(series, x_label="GRPO step", y_label="per step", y_range=(0.0, 1.0), title="training steps")


_STEP_SERIES = (("reward", "reward"), ("informative share", "informative_share"))


@router.get("/runs/{run_id}/adapter", response_class=HTMLResponse)
async def adapter(request: Request, run_id: str, name: str) -> HTMLResponse:
    src = sources(request)
    run = src.store.get_run(run_id)
    row = src.store.get_adapter(run_id, name)
    if row is None:
        known = ", ".join(a.name for a in src.store.adapters(run_id)) or "none yet"
        raise NotFound(f"run {run_id} has no adapter {name!r} (its adapters: {known})")
    m = row.metrics
    curve = m.get("curve") or m.get("heldout_curve") or []
    steps = src.adapter_steps(run_id, name, row.path)
    return render(
        request,
        "adapter.html",
        run=run,
        a=row,
        m=m,
        curve=curve,
        curve_plot=_curve_plot(curve),
        steps=steps,
        steps_plot=_steps_plot(steps),
        meta=src.adapter_metadata(run_id, name, row.path),
        env=next((e for e in reversed(src.store.env_attempts(run_id, row.capability)) if e.passed), None)
        if row.capability
        else None,
        evaluation=src.store.get_evaluation(run_id, f"eval:adapter:{name}"),
    )


def _forest(run_id: str, evals: list[Any]) -> Any:
    """Each policy's paired difference to base, overall and on its focus family, linked to the episodes behind it."""
    rows = []
    for e in evals:
        m, name = e.metrics, e.name.removeprefix("eval:")
        if name == "base":
            continue
        child, focus, paired = m.get("child_run") or run_id, m.get("focus_family"), m.get("vs_base_paired") or {}
        fam = ((m.get("vs_base_by_family") or {}).get(focus) or {}) if focus else {}
        for label, part, href in (
            (f"{name} (N={paired.get('episodes', 0)})", paired, links.episodes(child)),
            (f"{name} · {focus} (N={fam.get('episodes', 0)})", fam, links.episodes(child, family=focus)),
        ):
            pr = part.get("pass_rate") or {}
            if pr.get("value") is not None and pr.get("low") is not None:
                rows.append(svg.Row(label, 100 * pr["value"], 100 * pr["low"], 100 * pr["high"], href))
    if not rows:
        return None
    return svg.forest(
        rows, x_label="Δ pass rate vs base, points (paired episodes, 95% interval)", title="paired differences"
    )


@router.get("/runs/{run_id}/evaluation", response_class=HTMLResponse)
async def evaluation(request: Request, run_id: str) -> HTMLResponse:
    store = sources(request).store
    run = store.get_run(run_id)
    evals, router_row, lines = evaluation_rows(store, run_id)
    families = sorted({f for e in evals for f in (e.metrics.get("by_family") or {})})
    routed = next((e for e in evals if e.name == "eval:trace_routed"), None)
    routing = (routed.metrics.get("routing") or {}) if routed is not None else {}
    rm = router_row.metrics if router_row is not None else {}
    matrix = rm.get("matrix") or []
    top = max((n for r in matrix for n in r), default=0)
    return render(
        request,
        "evaluation.html",
        run=run,
        evals=evals,
        families=families,
        headline=lines,
        forest=_forest(run_id, evals),
        routing=routing,
        routed=routed,
        router_row=router_row,
        rm=rm,
        matrix=matrix,
        top=top or 1,
    )
