"""The router (docs/evaluation.md): which adapter, or the base model, answers a task, decided from its first user
message. `router.py`: `Router` and its options, decisions and the one backend interface (`Scorer`); one backend per
module: `labels.py` (the paper's label scorer: a local model or a vLLM server's completions) and `gate.py` (the
learned gate, its examples and training); `config.py`: the `routing:` section; `policy.py`: `RoutedPolicy`."""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {  # name -> the module holding it, imported on first use: loading the config needs neither numpy nor httpx
    "GateConfig": "config",
    "RoutingConfig": "config",
    "GateRecord": "gate",
    "CompletionsScorer": "labels",
    "LabelScorer": "labels",
    "TransformersScorer": "labels",
    "RoutedPolicy": "policy",
    **{
        name: "router"
        for name in (
            "NONE",
            "NoScorer",
            "RouteDecision",
            "RouteOption",
            "Router",
            "RouterError",
            "Scorer",
            "compact_trajectory",
            "confusion",
            "first_user_message",
            "make_options",
        )
    },
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOME)
