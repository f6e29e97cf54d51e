"""Check 1: the env loads and exposes valid OpenAI tool schemas, and its tools
match the target env's where they share a name (fidelity)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gapforge.sandbox.checks.probe import EnvFault, Probe
from gapforge.sandbox.checks.report import CheckResult
from gapforge.sandbox.checks.schemas import fidelity_problems, result_format, schema_problems


def check_loads(probe: Probe) -> tuple[CheckResult, list[dict[str, Any]] | None]:
    """Open the env and read tools(); returns the tools when they could be read."""
    try:
        tools = probe.guard("tools", None, probe.env().tools)
    except EnvFault as fault:
        return CheckResult.fail("loads", f"the env did not load: {fault.describe()}", **fault.evidence()), None
    problems = schema_problems(tools)
    names = (
        [t["function"]["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if isinstance(tools, list)
        else []
    )
    if problems:
        return CheckResult.fail(
            "loads", f"{len(problems)} tool schema problem(s): {problems[0]}", problems=problems, tools=names
        ), tools
    return CheckResult.ok("loads", f"{len(tools)} valid tool schemas: {', '.join(names)}", tools=names), tools


def check_fidelity(
    probe: Probe,
    tools: list[dict[str, Any]] | None,
    target_tools: list[dict[str, Any]] | None,
    seeds: list[int],
    target_result_formats: dict[str, str] | None = None,
) -> CheckResult:
    """Shared tool names must have the target's parameter names, types and required lists;
    where the target's result format is known, the env's tool results must have it too."""
    if target_tools is None:
        return CheckResult.skip("fidelity", "no target env given (--target): tool fidelity not checked")
    valid = [t for t in tools or [] if not schema_problems([t])]  # invalid ones are the loads check's failure
    shared, problems = fidelity_problems(valid, target_tools)
    formats = _observed_formats(probe, seeds)
    for name in shared:
        want = (target_result_formats or {}).get(name)
        seen = formats.get(name)
        if want and seen and set(seen) != {want}:
            problems.append(f"tool '{name}': results are {dict(seen)}, target returns {want}")
    evidence = {"shared_tools": shared, "result_formats": {k: dict(v) for k, v in formats.items() if k in shared}}
    if problems:
        return CheckResult.fail(
            "fidelity",
            f"{len(problems)} mismatch(es) with the target's tools: {problems[0]}",
            problems=problems,
            **evidence,
        )
    if not shared:
        return CheckResult.skip(  # nothing compared is no evidence of fidelity: said, not passed
            "fidelity",
            "not checked: no tool name shared with the target env (is --target the env it trains for?)",
            **evidence,
        )
    return CheckResult.ok("fidelity", f"{len(shared)} shared tool(s) match the target: {', '.join(shared)}", **evidence)


def _observed_formats(probe: Probe, seeds: list[int]) -> dict[str, Counter[str]]:
    """Result formats per tool name over the reference episodes that ran (faults are other checks' business)."""
    out: dict[str, Counter[str]] = {}
    for seed in seeds[:3]:
        try:
            episode = probe.reference(seed)
        except EnvFault:
            continue
        for name, content in episode.tool_results():
            out.setdefault(name, Counter())[result_format(content)] += 1
    return out
