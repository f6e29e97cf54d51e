"""The store: SQLAlchemy models, engine/sessions and the queries later stages use (DESIGN.md §8)."""

from store.analysis import LabelIn
from store.db import Store
from store.errors import StoreError
from store.rows import (
    AdapterRow,
    CapabilityRow,
    CapabilityStatRow,
    EpisodeRow,
    EvaluationRow,
    LabelRow,
    LabelValue,
    RunRow,
    SyntheticEnvRow,
    ValidationRow,
)

__all__ = [
    "AdapterRow",
    "CapabilityRow",
    "CapabilityStatRow",
    "EpisodeRow",
    "EvaluationRow",
    "LabelIn",
    "LabelRow",
    "LabelValue",
    "RunRow",
    "Store",
    "StoreError",
    "SyntheticEnvRow",
    "ValidationRow",
]
