"""The router (docs/evaluation.md): which adapter, or the base model, answers a task, decided from its first user
message. `router.py`: `Router` and its options, decisions and the one backend interface (`Scorer`); one backend per
module: `labels.py` (the paper's label scorer: a local model or a vLLM server's completions) and `gate.py` (the
learned gate, its examples and training); `config.py`: the `routing:` section; `policy.py`: `RoutedPolicy`."""

from gapforge.agents.router.config import GateConfig, RoutingConfig
from gapforge.agents.router.gate import GateRecord
from gapforge.agents.router.labels import CompletionsScorer, LabelScorer, TransformersScorer
from gapforge.agents.router.policy import RoutedPolicy
from gapforge.agents.router.router import (
    NONE,
    NoScorer,
    RouteDecision,
    RouteOption,
    Router,
    RouterError,
    Scorer,
    compact_trajectory,
    confusion,
    first_user_message,
    make_options,
)

__all__ = [
    "NONE",
    "CompletionsScorer",
    "GateConfig",
    "GateRecord",
    "LabelScorer",
    "NoScorer",
    "RouteDecision",
    "RouteOption",
    "RoutedPolicy",
    "Router",
    "RouterError",
    "RoutingConfig",
    "Scorer",
    "TransformersScorer",
    "compact_trajectory",
    "confusion",
    "first_user_message",
    "make_options",
]
