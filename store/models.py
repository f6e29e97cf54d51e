"""SQLAlchemy 2 ORM tables for a whole gapforge run (store/README.md).

Every table a stage writes has a unique key, so a resumed stage upserts instead of duplicating rows. JSON columns
use the generic `JSON` type (TEXT on SQLite, json on PostgreSQL): key order and values round-trip exactly.
Timestamps are UTC. These classes never leave a session: queries hand out the frozen rows of store/rows.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, ForeignKeyConstraint, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# 2: episodes keep score_info, step_info, user_prompt, started_at. 3: leases are fenced (run_leases.epoch); names
# earlier versions stored (`baseline_hints`, `?network=recorded`) are no longer read: an older store is refused.
SCHEMA_VERSION = "3"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Stamped:
    """created_at / updated_at on tables that are upserted."""

    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class OfRun:
    """An integer id and the run the row belongs to: the table's first two columns."""

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True, sort_order=-2)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), sort_order=-1)


def _capability_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(["run_id", "capability"], ["capabilities.run_id", "capabilities.name"])


class StoreMeta(Base):
    """Key/value facts about the store itself (schema version)."""

    __tablename__ = "store_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Run(Stamped, Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]]
    versions: Mapped[dict[str, Any]]  # package versions, python, platform: for reproducibility


class Episode(OfRun, Base):
    """One rollout of a policy on one task (target env) or seed (synthetic env). Write-once."""

    __tablename__ = "episodes"
    __table_args__ = (
        UniqueConstraint("run_id", "env", "task_id", "sample", name="uq_episode_key"),
        UniqueConstraint("run_id", "id", name="uq_episode_run_id"),  # target of labels' (run, episode) key
        Index("ix_episodes_run_env_success", "run_id", "env", "success"),
        Index("ix_episodes_run_family", "run_id", "task_family", "success"),  # the viewer's family filter
    )
    env: Mapped[str] = mapped_column(String(128))
    task_id: Mapped[str] = mapped_column(String(256))
    sample: Mapped[int]
    policy: Mapped[str] = mapped_column(String(256))  # base model, adapter or router name
    messages: Mapped[list[Any]]
    reward: Mapped[float]
    success: Mapped[bool]
    components: Mapped[dict[str, Any]]
    termination: Mapped[str] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    turns: Mapped[int]
    timings: Mapped[dict[str, Any]]
    task_family: Mapped[str | None] = mapped_column(String(128))
    # The env's evidence: Score.info (e.g. tau2's evaluation type, missing gold actions),
    # every non-empty StepResult.info as {"turn", "info"}, the user simulator's prompt
    # name@version, and when the episode started (created_at is when it was stored).
    score_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    step_info: Mapped[list[Any]] = mapped_column(default=list)
    user_prompt: Mapped[str | None] = mapped_column(String(128))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Capability(OfRun, Stamped, Base):
    """One entry of the discovered capability dictionary."""

    __tablename__ = "capabilities"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_capability_key"),)
    name: Mapped[str] = mapped_column(String(128))
    definition: Mapped[str] = mapped_column(Text)
    example_episode_ids: Mapped[list[Any]]
    prompt_name: Mapped[str | None] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    retained: Mapped[bool | None]  # set by the select stage after the stability vote


class Label(OfRun, Stamped, Base):
    """Episode x capability x analysis pass -> NA / PRESENT / LACKING, with evidence."""

    __tablename__ = "labels"
    __table_args__ = (
        UniqueConstraint("episode_id", "capability", "pass_index", name="uq_label_key"),
        _capability_fk(),
        ForeignKeyConstraint(["run_id", "episode_id"], ["episodes.run_id", "episodes.id"]),  # same run
        Index("ix_labels_run_pass", "run_id", "pass_index"),
        # a capability's episodes by label, in episode order (the viewer pages through them)
        Index("ix_labels_run_capability_value", "run_id", "capability", "value", "episode_id"),
    )
    episode_id: Mapped[int]
    capability: Mapped[str] = mapped_column(String(128))
    pass_index: Mapped[int]
    value: Mapped[str] = mapped_column(String(16))
    evidence: Mapped[str] = mapped_column(Text, default="")


class CapabilityStat(OfRun, Stamped, Base):
    """ER+, ER-, gap and coverage of one capability in one labeling pass."""

    __tablename__ = "capability_stats"
    __table_args__ = (
        UniqueConstraint("run_id", "capability", "pass_index", name="uq_capability_stat_key"),
        _capability_fk(),
    )
    capability: Mapped[str] = mapped_column(String(128))
    pass_index: Mapped[int]
    er_plus: Mapped[float | None]  # None when no success needed the capability
    er_minus: Mapped[float | None]
    gap: Mapped[float | None]
    coverage: Mapped[float | None]  # None when the pass has no labeled failure
    kept: Mapped[bool]


class LabelCall(OfRun, Stamped, Base):
    """One labeling call (episode x pass) of the analyst: the cache key of labeling, its outcome and cost.

    Keyed by (episode, pass, dictionary hash, prompt version): a re-run finds it and makes no call.
    status "ok" = its labels are in `labels`; "failed" = recorded failure (never silently NA).
    """

    __tablename__ = "label_calls"
    __table_args__ = (
        UniqueConstraint("episode_id", "pass_index", "dictionary_hash", "prompt_version", name="uq_label_call_key"),
        ForeignKeyConstraint(["run_id", "episode_id"], ["episodes.run_id", "episodes.id"]),
        Index("ix_label_calls_run_pass", "run_id", "pass_index"),
    )
    episode_id: Mapped[int]
    pass_index: Mapped[int]
    dictionary_hash: Mapped[str] = mapped_column(String(64))
    prompt_name: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    boundary: Mapped[str | None] = mapped_column(String(32))  # who failed: endpoint | model_output
    error: Mapped[str | None] = mapped_column(Text)
    answer: Mapped[list[Any]]
    calls: Mapped[int]
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    seed: Mapped[int]


class Discovery(Stamped, Base):
    """The discovery step of a run: which episodes the analyst saw, the dictionary hash, its cost."""

    __tablename__ = "discoveries"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), unique=True)
    dictionary_hash: Mapped[str] = mapped_column(String(64))
    prompt_name: Mapped[str] = mapped_column(String(128))
    prompt_version: Mapped[str] = mapped_column(String(64))
    sample_episode_ids: Mapped[list[Any]]
    details: Mapped[dict[str, Any]]  # calls, tokens, token counter, re-ask error


class AnalysisSplit(Stamped, Base):
    """A run's target tasks split into the analysis split and the held-out evaluation split."""

    __tablename__ = "analysis_splits"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), unique=True)
    env: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int]
    fraction: Mapped[float]
    analysis_tasks: Mapped[list[Any]]
    heldout_tasks: Mapped[list[Any]]
    families: Mapped[dict[str, Any]]  # task id -> family


class CapabilitySummary(OfRun, Stamped, Base):
    """One capability across the R labeling passes: pooled rates, bootstrap intervals, kappa, the vote."""

    __tablename__ = "capability_summaries"
    __table_args__ = (UniqueConstraint("run_id", "capability", name="uq_capability_summary_key"), _capability_fk())
    capability: Mapped[str] = mapped_column(String(128))
    dictionary_hash: Mapped[str] = mapped_column(String(64))
    passes: Mapped[int]
    kept_passes: Mapped[int]
    required_passes: Mapped[int]
    er_plus: Mapped[float | None]
    er_minus: Mapped[float | None]
    gap: Mapped[float | None]
    gap_low: Mapped[float | None]
    gap_high: Mapped[float | None]
    coverage: Mapped[float | None]
    coverage_low: Mapped[float | None]
    coverage_high: Mapped[float | None]
    kappa: Mapped[float | None]
    retained: Mapped[bool]
    verdict: Mapped[str] = mapped_column(String(64))  # retained | below thresholds | unstable | insufficient evidence
    details: Mapped[dict[str, Any]]


class SyntheticEnv(OfRun, Stamped, Base):
    """One generated environment module (one generator attempt for one capability)."""

    __tablename__ = "synthetic_envs"
    __table_args__ = (
        UniqueConstraint("run_id", "capability", "attempt", name="uq_synthetic_env_key"),
        _capability_fk(),
    )
    capability: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int]
    code: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    prompt_name: Mapped[str | None] = mapped_column(String(128))
    prompt_version: Mapped[str | None] = mapped_column(String(64))


class Validation(Stamped, Base):
    """The self-test report of one synthetic env attempt."""

    __tablename__ = "validations"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    synthetic_env_id: Mapped[int] = mapped_column(ForeignKey("synthetic_envs.id"), unique=True)
    report: Mapped[dict[str, Any]]
    passed: Mapped[bool]


class Adapter(OfRun, Stamped, Base):
    """A trained LoRA adapter (per capability, or a baseline with capability None)."""

    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_adapter_key"), _capability_fk())
    name: Mapped[str] = mapped_column(String(128))
    capability: Mapped[str | None] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(32))


class Evaluation(OfRun, Stamped, Base):
    """Metrics of one policy (base, an adapter, the router, a baseline) on an evaluation set."""

    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_evaluation_key"),)
    name: Mapped[str] = mapped_column(String(128))
    policy: Mapped[str] = mapped_column(String(256))
    metrics: Mapped[dict[str, Any]]


class RunLease(Base):
    """Which process works on a run now (one at a time). A holder is host + pid + the process's
    start time; a lease whose process is gone (same host) or whose heartbeat is older than its
    ttl (any host) may be taken over, which raises its `epoch` (the fencing token every write of
    the run is checked against: store/fencing.py)."""

    __tablename__ = "run_leases"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    host: Mapped[str] = mapped_column(String(256))
    pid: Mapped[int]
    command: Mapped[str] = mapped_column(String(256))
    ttl_s: Mapped[float]
    acquired_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    epoch: Mapped[int] = mapped_column(default=0, server_default="0")  # fencing token: +1 on every takeover
