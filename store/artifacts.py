"""What a run builds: synthetic envs, their validations, adapters and evaluations.

All writes are upserts on the table's unique key (latest write wins): a retried synthesis attempt, a re-run
validation, a retrained adapter or a repeated evaluation replaces its own row instead of adding one.
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
        key = ("run_id", "capability", "attempt")
        return self._put(SyntheticEnvRow, SyntheticEnv, values, key, no_capability(run_id, capability))

    def set_synthetic_env_status(self, synthetic_env_id: int, status: str) -> None:
        with self._write() as session:
            env = session.get(SyntheticEnv, synthetic_env_id)
            if env is None:
                raise _unknown_env(synthetic_env_id)
            self._fence(session, env.run_id)
            env.status, env.updated_at = status, utcnow()

    def get_synthetic_env(self, synthetic_env_id: int) -> SyntheticEnvRow:
        with self._read() as session:
            env = session.get(SyntheticEnv, synthetic_env_id)
            if env is None:
                raise _unknown_env(synthetic_env_id)
            return to_row(SyntheticEnvRow, env)

    def synthetic_envs(self, run_id: str, capability: str | None = None) -> list[SyntheticEnvRow]:
        """Attempts of a run, ordered by capability then attempt."""
        order = [SyntheticEnv.capability, SyntheticEnv.attempt]
        return self._list(SyntheticEnvRow, SyntheticEnv, run_id, order, capability=capability)

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
        return self._put(AdapterRow, Adapter, values, ("run_id", "name"), no_capability(run_id, capability))

    def get_adapter(self, run_id: str, name: str) -> AdapterRow | None:
        return self._one(AdapterRow, Adapter, run_id, name=name)

    def adapters(self, run_id: str) -> list[AdapterRow]:
        return self._list(AdapterRow, Adapter, run_id, [Adapter.id])

    # --- evaluations --------------------------------------------------------------------------
    def put_evaluation(self, run_id: str, name: str, *, policy: str, metrics: Mapping[str, Any]) -> EvaluationRow:
        """Upsert by (run, name); `policy` names what was evaluated (base, an adapter, router, a baseline)."""
        values = {"run_id": run_id, "name": name, "policy": policy, "metrics": dict(metrics)}
        return self._put(EvaluationRow, Evaluation, values, ("run_id", "name"))

    def get_evaluation(self, run_id: str, name: str) -> EvaluationRow | None:
        return self._one(EvaluationRow, Evaluation, run_id, name=name)

    def evaluations(self, run_id: str) -> list[EvaluationRow]:
        return self._list(EvaluationRow, Evaluation, run_id, [Evaluation.id])


def _unknown_env(synthetic_env_id: int) -> StoreError:
    return StoreError(f"unknown synthetic env id {synthetic_env_id}: list the run's synthetic envs to find valid ids")
