"""Detached, typed rows the store hands out (never live ORM objects): frozen dataclasses whose fields mirror the
columns of the table of the same name in store/models.py. Timestamps are timezone-aware UTC."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, get_args

LabelValue = Literal["NA", "PRESENT", "LACKING"]
LABEL_VALUES: tuple[str, ...] = get_args(LabelValue)


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    kind: str
    status: str
    config: dict[str, Any]
    versions: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    id: int
    run_id: str
    env: str
    task_id: str
    sample: int
    policy: str
    messages: list[Any]
    reward: float
    success: bool
    components: dict[str, Any]
    termination: str
    error: str | None
    turns: int
    timings: dict[str, Any]
    task_family: str | None
    created_at: datetime
    # the env's evidence (schema 2); defaults keep hand-built rows in tests short
    score_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    step_info: list[Any] = dataclasses.field(default_factory=list)
    user_prompt: str | None = None
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EpisodeSummaryRow:
    """An episode without its trajectory (no messages, no step_info): what statistics
    over all episodes need, cheap to load many times (`Store.episode_summaries`)."""

    id: int
    run_id: str
    env: str
    task_id: str
    sample: int
    policy: str
    reward: float
    success: bool
    components: dict[str, Any]
    termination: str
    error: str | None
    turns: int
    task_family: str | None
    created_at: datetime
    score_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_prompt: str | None = None
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CapabilityRow:
    id: int
    run_id: str
    name: str
    definition: str
    example_episode_ids: list[Any]
    prompt_name: str | None
    prompt_version: str | None
    retained: bool | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class LabelRow:
    id: int
    run_id: str
    episode_id: int
    capability: str
    pass_index: int
    value: LabelValue
    evidence: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class CapabilityStatRow:
    id: int
    run_id: str
    capability: str
    pass_index: int
    er_plus: float | None
    er_minus: float | None
    gap: float | None
    coverage: float | None
    kept: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SyntheticEnvRow:
    id: int
    run_id: str
    capability: str
    attempt: int
    code: str
    sha256: str
    status: str
    prompt_name: str | None
    prompt_version: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ValidationRow:
    id: int
    synthetic_env_id: int
    report: dict[str, Any]
    passed: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AdapterRow:
    id: int
    run_id: str
    name: str
    capability: str | None
    path: str
    metrics: dict[str, Any]
    status: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EvaluationRow:
    id: int
    run_id: str
    name: str
    policy: str
    metrics: dict[str, Any]
    created_at: datetime
    updated_at: datetime


R = TypeVar("R")


def _coerce(type_name: Any, value: Any) -> Any:
    # SQLite's RETURNING hands back 1.0 as the integer 1 (before column affinity): restore floats. SQLite hands back
    # naive datetimes; everything the store writes is UTC.
    if value is not None and type_name in ("float", "float | None"):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def to_row(cls: type[R], obj: object) -> R:
    """Copy the columns of a live ORM object into a detached row of type `cls`."""
    values = {f.name: _coerce(f.type, getattr(obj, f.name)) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**values)
