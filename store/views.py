"""Paged read queries for the viewer (`gapforge ui`): one page of rows and its total, never a whole table, so every
page stays fast on a store with tens of thousands of episodes. Each query selects only the columns its page shows
(no trajectories, no env code) and rides an index: episodes by (run, ...), labels by (run, capability, value, episode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from sqlalchemy import distinct, func, select

from gapforge.store.engine import StoreBase
from gapforge.store.models import Episode, Label, Run, SyntheticEnv, Validation
from gapforge.store.rows import EpisodeSummaryRow, LabelRow, RunRow, to_row

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    rows: list[T]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True, slots=True)
class Vote:
    pass_index: int
    value: str
    evidence: str


@dataclass(frozen=True, slots=True)
class LabeledEpisode:
    """An episode with a capability's label in each analysis pass (the R votes)."""

    episode: EpisodeSummaryRow
    votes: list[Vote]


@dataclass(frozen=True, slots=True)
class EnvAttemptHead:
    """A synthetic env attempt without its code, with its validation outcome (None: not validated)."""

    id: int
    run_id: str
    capability: str
    attempt: int
    sha256: str
    status: str
    prompt_name: str | None
    prompt_version: str | None
    created_at: datetime
    passed: bool | None


_SUMMARY = [getattr(Episode, f.name) for f in dataclasses.fields(EpisodeSummaryRow)]


class ViewQueries(StoreBase):
    def runs_page(self, kinds: Sequence[str], *, offset: int = 0, limit: int = 50) -> Page[RunRow]:
        """Runs of these kinds, newest first."""
        where = Run.kind.in_(list(kinds))
        with self._read() as session:
            total = session.scalar(select(func.count()).select_from(Run).where(where)) or 0
            runs = session.scalars(
                select(Run).where(where).order_by(Run.created_at.desc(), Run.id).offset(offset).limit(limit)
            )
            return Page([to_row(RunRow, r) for r in runs], int(total), offset, limit)

    def child_runs(self, run_id: str) -> list[RunRow]:
        """The runs a run made for itself (`RUN.eval.POLICY`: the evaluation's episodes)."""
        return self._rows(RunRow, select(Run).where(Run.id.startswith(f"{run_id}.", autoescape=True)).order_by(Run.id))

    def episodes_page(
        self,
        run_id: str,
        *,
        success: bool | None = None,
        family: str | None = None,
        task_id: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> Page[EpisodeSummaryRow]:
        """A run's episodes without trajectories, in insertion order, optionally filtered.

        Filters ride indexes (reading a row to test a column stored after its messages reads the
        whole trajectory): the run's envs are named so that (run, env, success) and the episode
        key (run, env, task, sample) apply; a family uses (run, family, success)."""
        where = [Episode.run_id == run_id]
        if success is not None:
            where.append(Episode.success == success)
        if family is not None:
            where.append(Episode.task_family == family)
        if task_id is not None:
            where.append(Episode.task_id == task_id)
        with self._read() as session:
            self._require_run(session, run_id)
            if family is None:
                where.append(
                    Episode.env.in_(
                        list(session.scalars(select(Episode.env).where(Episode.run_id == run_id).distinct()))
                    )
                )
            total = session.scalar(select(func.count()).select_from(Episode).where(*where)) or 0
            rows = session.execute(select(*_SUMMARY).where(*where).order_by(Episode.id).offset(offset).limit(limit))
            return Page([to_row(EpisodeSummaryRow, r) for r in rows], int(total), offset, limit)

    def episode_outcomes(self, run_id: str) -> dict[str, int]:
        """{"episodes": n, "successes": n} of a run, counted in the database."""
        stmt = select(func.count(), func.count().filter(Episode.success.is_(True))).where(Episode.run_id == run_id)
        with self._read() as session:
            n, wins = session.execute(stmt).one()
            return {"episodes": int(n or 0), "successes": int(wins or 0)}

    def label_counts(self, run_id: str, capability: str) -> dict[str, int]:
        """Label value -> number of episodes labeled so in at least one pass."""
        stmt = (
            select(Label.value, func.count(distinct(Label.episode_id)))
            .where(Label.run_id == run_id, Label.capability == capability)
            .group_by(Label.value)
        )
        with self._read() as session:
            return {v: int(n) for v, n in session.execute(stmt)}

    def labeled_episodes(
        self, run_id: str, capability: str, value: str, *, offset: int = 0, limit: int = 50
    ) -> Page[LabeledEpisode]:
        """Episodes labeled `value` for `capability` in at least one pass, with every pass's vote and evidence."""
        where = (Label.run_id == run_id, Label.capability == capability, Label.value == value)
        with self._read() as session:
            total = session.scalar(select(func.count(distinct(Label.episode_id))).where(*where)) or 0
            ids = list(
                session.scalars(
                    select(Label.episode_id)
                    .where(*where)
                    .group_by(Label.episode_id)
                    .order_by(Label.episode_id)
                    .offset(offset)
                    .limit(limit)
                )
            )
            votes: dict[int, list[Vote]] = {i: [] for i in ids}
            # by (episode, capability): the label key's index (filtering on the run too would make SQLite
            # scan every label of the run through ix_labels_run_pass; an episode id belongs to one run)
            stmt = (
                select(Label.episode_id, Label.pass_index, Label.value, Label.evidence)
                .where(Label.episode_id.in_(ids), Label.capability == capability)
                .order_by(Label.pass_index)
            )
            for eid, p, v, ev in session.execute(stmt):
                votes[eid].append(Vote(p, v, ev))
            episodes = {
                r.id: to_row(EpisodeSummaryRow, r)
                for r in session.execute(select(*_SUMMARY).where(Episode.id.in_(ids)))
            }
        return Page([LabeledEpisode(episodes[i], votes[i]) for i in ids if i in episodes], int(total), offset, limit)

    def episode_labels(self, episode_id: int) -> list[LabelRow]:
        """What the analyst said about one episode: every capability in every pass."""
        return self._rows(
            LabelRow, select(Label).filter_by(episode_id=episode_id).order_by(Label.capability, Label.pass_index)
        )

    def env_attempts(self, run_id: str, capability: str | None = None) -> list[EnvAttemptHead]:
        """Synthetic env attempts (no code), ordered by capability then attempt, with their validation outcome."""
        cols = [getattr(SyntheticEnv, f.name) for f in dataclasses.fields(EnvAttemptHead)[:-1]] + [Validation.passed]
        stmt = (
            select(*cols)
            .outerjoin(Validation, Validation.synthetic_env_id == SyntheticEnv.id)
            .where(SyntheticEnv.run_id == run_id)
            .order_by(SyntheticEnv.capability, SyntheticEnv.attempt)
        )
        if capability is not None:
            stmt = stmt.where(SyntheticEnv.capability == capability)
        with self._read() as session:
            return [to_row(EnvAttemptHead, r) for r in session.execute(stmt)]

    def previous_attempt(self, run_id: str, capability: str, attempt: int) -> int | None:
        """The id of the attempt just before `attempt` for this capability, or None."""
        stmt = (
            select(SyntheticEnv.id)
            .where(SyntheticEnv.run_id == run_id, SyntheticEnv.capability == capability, SyntheticEnv.attempt < attempt)
            .order_by(SyntheticEnv.attempt.desc())
            .limit(1)
        )
        with self._read() as session:
            return session.scalar(stmt)
