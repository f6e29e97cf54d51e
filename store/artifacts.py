"""What a run builds: synthetic envs, their validations, adapters and evaluations.

All writes are upserts on the table's unique key (latest write wins): a retried
synthesis attempt, a re-run validation, a retrained adapter or a repeated
evaluation replaces its own row instead of adding one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from gapforge.store.engine import StoreBase, no_capability
from gapforge.store.errors import StoreError
from gapforge.store.models import Adapter, Evaluation, SyntheticEnv, Validation, utcnow
from gapforge.store.rows import AdapterRow, EvaluationRow, SyntheticEnvRow, ValidationRow, to_row


class ArtifactQueries(StoreBase):
    # --- synthetic envs -----------------------------------------------------------------------
    def put_synthetic_env(
        self,
        run_id: str,
        capability: str,
        attempt: int,
        *,
        code: str,
        status: str,
        prompt_name: str | None = None,
        prompt_version: str | None = None,
    ) -> SyntheticEnvRow:
        """Upsert one generator attempt, keyed by (run, capability, attempt); sha256 is of `code`."""
        values = {
            "run_id": run_id,
            "capability": capability,
            "attempt": attempt,
            "code": code,
            "sha256": hashlib.sha256(code.encode()).hexdigest(),
            "status": status,
            "prompt_name": prompt_name,
            "prompt_version": prompt_version,
        }
        with self._write(run_id, no_capability(run_id, capability)) as session:
            row = self._upsert(session, SyntheticEnv, values, ("run_id", "capability", "attempt"))
            return to_row(SyntheticEnvRow, row)

    def set_synthetic_env_status(self, synthetic_env_id: int, status: str) -> None:
        with self._write() as session:
            env = session.get(SyntheticEnv, synthetic_env_id)
            if env is None:
                raise _unknown_env(synthetic_env_id)
            self._fence(session, env.run_id)
            env.status = status
            env.updated_at = utcnow()

    def get_synthetic_env(self, synthetic_env_id: int) -> SyntheticEnvRow:
        with self._read() as session:
            env = session.get(SyntheticEnv, synthetic_env_id)
            if env is None:
                raise _unknown_env(synthetic_env_id)
            return to_row(SyntheticEnvRow, env)

    def synthetic_envs(self, run_id: str, capability: str | None = None) -> list[SyntheticEnvRow]:
        """Attempts of a run, ordered by capability then attempt."""
        stmt = (
            select(SyntheticEnv)
            .where(SyntheticEnv.run_id == run_id)
            .order_by(SyntheticEnv.capability, SyntheticEnv.attempt)
        )
        if capability is not None:
            stmt = stmt.where(SyntheticEnv.capability == capability)
        with self._read() as session:
            self._require_run(session, run_id)
            return [to_row(SyntheticEnvRow, e) for e in session.scalars(stmt)]

    # --- validations --------------------------------------------------------------------------
    def put_validation(self, synthetic_env_id: int, *, report: Mapping[str, Any], passed: bool) -> ValidationRow:
        """Upsert the self-test report of one synthetic env attempt (one report per attempt)."""
        values = {"synthetic_env_id": synthetic_env_id, "report": dict(report), "passed": passed}
        with self._write(missing=str(_unknown_env(synthetic_env_id))) as session:
            env = session.get(SyntheticEnv, synthetic_env_id)
            if env is not None:
                self._fence(session, env.run_id)
            return to_row(ValidationRow, self._upsert(session, Validation, values, ("synthetic_env_id",)))

    def get_validation(self, synthetic_env_id: int) -> ValidationRow | None:
        with self._read() as session:
            val = session.scalars(select(Validation).where(Validation.synthetic_env_id == synthetic_env_id)).first()
            return None if val is None else to_row(ValidationRow, val)

    # --- adapters -----------------------------------------------------------------------------
    def put_adapter(
        self,
        run_id: str,
        name: str,
        *,
        path: str,
        metrics: Mapping[str, Any],
        status: str,
        capability: str | None = None,
    ) -> AdapterRow:
        """Upsert by (run, name). `capability` is None for baselines that serve no single capability."""
        values = {
            "run_id": run_id,
            "name": name,
            "capability": capability,
            "path": str(path),
            "metrics": dict(metrics),
            "status": status,
        }
        with self._write(run_id, no_capability(run_id, capability)) as session:
            return to_row(AdapterRow, self._upsert(session, Adapter, values, ("run_id", "name")))

    def get_adapter(self, run_id: str, name: str) -> AdapterRow | None:
        with self._read() as session:
            self._require_run(session, run_id)
            row = session.scalars(select(Adapter).where(Adapter.run_id == run_id, Adapter.name == name)).first()
            return None if row is None else to_row(AdapterRow, row)

    def adapters(self, run_id: str) -> list[AdapterRow]:
        with self._read() as session:
            self._require_run(session, run_id)
            rows = session.scalars(select(Adapter).where(Adapter.run_id == run_id).order_by(Adapter.id))
            return [to_row(AdapterRow, a) for a in rows]

    # --- evaluations --------------------------------------------------------------------------
    def put_evaluation(self, run_id: str, name: str, *, policy: str, metrics: Mapping[str, Any]) -> EvaluationRow:
        """Upsert by (run, name); `policy` names what was evaluated (base, an adapter, router, a baseline)."""
        values = {"run_id": run_id, "name": name, "policy": policy, "metrics": dict(metrics)}
        with self._write(run_id) as session:
            return to_row(EvaluationRow, self._upsert(session, Evaluation, values, ("run_id", "name")))

    def get_evaluation(self, run_id: str, name: str) -> EvaluationRow | None:
        with self._read() as session:
            self._require_run(session, run_id)
            row = session.scalars(
                select(Evaluation).where(Evaluation.run_id == run_id, Evaluation.name == name)
            ).first()
            return None if row is None else to_row(EvaluationRow, row)

    def evaluations(self, run_id: str) -> list[EvaluationRow]:
        with self._read() as session:
            self._require_run(session, run_id)
            rows = session.scalars(select(Evaluation).where(Evaluation.run_id == run_id).order_by(Evaluation.id))
            return [to_row(EvaluationRow, e) for e in rows]


def _unknown_env(synthetic_env_id: int) -> StoreError:
    return StoreError(f"unknown synthetic env id {synthetic_env_id}: list the run's synthetic envs to find valid ids")
