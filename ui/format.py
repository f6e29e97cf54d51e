"""Jinja filters and small display facts: numbers, intervals, JSON, who a failure is blamed on.

Every function returns plain text; the templates escape it (autoescape is on).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gapforge.evaluation.summary import points, verdict

# The episode loop's termination reasons (agents/episode.py) and the boundary each one blames.
BOUNDARY = {
    "done": "",
    "max_turns": "model (ran out of turns)",
    "malformed_output": "model (output the env could not parse)",
    "policy_error": "model",
    "endpoint_error": "policy endpoint (infrastructure)",
    "sandbox_error": "sandbox (infrastructure)",
    "worker_error": "rollout worker process (infrastructure)",
    "env_error": "env code",
}


def pct(value: Any, digits: int = 1) -> str:
    return "–" if not isinstance(value, int | float) else f"{100 * value:.{digits}f}%"


def num(value: Any, digits: int = 2) -> str:
    return "–" if value is None or value == "" else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def interval(iv: Any, as_pct: bool = True) -> str:
    """{"value", "low", "high"} -> '37.0% [18.2, 55.5]' (or plain numbers)."""
    if not isinstance(iv, Mapping) or iv.get("value") is None:
        return "–"
    if as_pct:
        low, high = iv.get("low"), iv.get("high")
        bounds = f" [{100 * low:.1f}, {100 * high:.1f}]" if low is not None and high is not None else ""
        return f"{100 * iv['value']:.1f}%{bounds}"
    bounds = f" [{num(iv.get('low'))}, {num(iv.get('high'))}]" if iv.get("low") is not None else ""
    return f"{num(iv['value'])}{bounds}"


def ci(value: Any, low: Any, high: Any) -> str:
    """A statistic with its bootstrap interval: '0.42 [0.22, 0.61]'."""
    if value is None:
        return "–"
    bounds = f" [{num(low)}, {num(high)}]" if low is not None and high is not None else ""
    return f"{num(value)}{bounds}"


def signed_points(iv: Any) -> str:
    return points(iv) if isinstance(iv, Mapping) and iv.get("value") is not None else "–"


def effect(iv: Any) -> str:
    return (verdict(iv) if isinstance(iv, Mapping) else None) or "–"


def pretty(obj: Any) -> str:
    return json.dumps(obj, indent=1, ensure_ascii=False, default=str, sort_keys=False)


def maybe_json(text: Any) -> str:
    """A tool result: pretty JSON when it is JSON, else the text as it is."""
    if not isinstance(text, str):
        return pretty(text)
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text
    return pretty(parsed) if isinstance(parsed, dict | list) else text


def call_args(args: Any) -> str:
    """A tool call's arguments: one line when short, indented JSON when long; a string that is not JSON as it is."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, ValueError):
            return args
    line = json.dumps(args, ensure_ascii=False, default=str)
    return line if len(line) <= 100 else pretty(args)


def when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, str) and len(value) >= 19:
        return value[:19].replace("T", " ")
    return num(value)


def boundary(termination: str | None) -> str:
    return BOUNDARY.get(termination or "", "unknown")


def seconds(value: Any) -> str:
    return "–" if not isinstance(value, int | float) else f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


FILTERS = {
    f.__name__: f
    for f in (pct, num, interval, signed_points, effect, pretty, maybe_json, call_args, when, boundary, seconds)
}
GLOBALS = {"ci": ci}
