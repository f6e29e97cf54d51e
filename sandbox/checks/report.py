"""The self-test report: one CheckResult per check, the verdict, and compact
feedback text for the generator LLM (which check, which seed, what happened).

Infrastructure is reported apart from the env: `sandbox_faults` lists every sandbox
lost to an outside cause and recovered (replayed on a fresh one) during the checks,
and `incomplete` says where and why the validation stopped when the endpoint or the
sandbox kept failing past the retries. An incomplete report never passes and is
never the env's failure: it is not sent to the generator."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["PASS", "FAIL", "SKIP", "INCOMPLETE"]
MAX_FAULTS_KEPT = 20
# evidence keys stored with the report but never shown to the generator: the held-out split's own text (the contamination
# check's matched opening), which the generator must not read
NOT_FOR_GENERATOR = frozenset({"heldout_text"})


def evidence_for_generator(evidence: dict[str, Any], max_chars: int = 600) -> str:
    """A check's evidence as the generator reads it: JSON without NOT_FOR_GENERATOR keys (at any depth), cut at
    `max_chars`."""

    def keep(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: keep(v) for k, v in value.items() if k not in NOT_FOR_GENERATOR}
        if isinstance(value, list):
            return [keep(v) for v in value]
        return value

    text = json.dumps(keep(evidence), default=str, sort_keys=True)
    return text[:max_chars] + ("..." if len(text) > max_chars else "")


class CheckResult(BaseModel):
    """The outcome of one check. `evidence` holds seeds, numbers and the env's error text."""

    model_config = ConfigDict(extra="forbid")

    name: str
    required: bool
    passed: bool
    skipped: bool = False
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    seconds: float = 0.0

    @property
    def verdict(self) -> Verdict:
        if self.evidence.get("incomplete"):
            return "INCOMPLETE"
        if self.skipped:
            return "SKIP"
        return "PASS" if self.passed else "FAIL"

    @classmethod
    def ok(cls, name: str, summary: str, required: bool = True, **evidence: Any) -> CheckResult:
        return cls(name=name, required=required, passed=True, summary=summary, evidence=evidence)

    @classmethod
    def fail(cls, name: str, summary: str, required: bool = True, **evidence: Any) -> CheckResult:
        return cls(name=name, required=required, passed=False, summary=summary, evidence=evidence)

    @classmethod
    def skip(cls, name: str, summary: str, required: bool = False, **evidence: Any) -> CheckResult:
        return cls(name=name, required=required, passed=False, skipped=True, summary=summary, evidence=evidence)

    @classmethod
    def interrupted(cls, name: str, summary: str) -> CheckResult:
        """Not decided: the infrastructure stopped it (not a failure of the env)."""
        return cls(
            name=name, required=False, passed=False, skipped=True, summary=summary, evidence={"incomplete": True}
        )


class ValidationReport(BaseModel):
    """All checks of one env module. `passed` is True only when every required check passed."""

    model_config = ConfigDict(extra="forbid")

    module: str = Field(description="path or name of the env module")
    module_sha256: str | None = None
    capability: str | None = None
    seeds: int
    target: str | None = None
    checks: list[CheckResult]
    seconds: float = 0.0
    sandbox_faults: list[dict[str, Any]] = Field(
        default_factory=list, description=f"sandboxes lost to outside causes (first {MAX_FAULTS_KEPT})"
    )
    sandbox_fault_count: int = 0
    incomplete: dict[str, Any] | None = Field(
        None, description="{check, cause: endpoint|sandbox, error} when the infrastructure stopped it"
    )

    @property
    def passed(self) -> bool:
        return self.incomplete is None and all(c.passed for c in self.checks if c.required)

    def faults_line(self) -> str | None:
        """One line on the sandboxes lost and recovered during the checks, or None."""
        if not self.sandbox_fault_count:
            return None
        kinds = sorted({f.get("kind", "?") for f in self.sandbox_faults})
        first = self.sandbox_faults[0] if self.sandbox_faults else {}
        return (
            f"{self.sandbox_fault_count} sandbox(es) lost to an outside cause ({', '.join(kinds)}) and replaced; "
            f"first: lost during {first.get('lost_call', '?')}, replayed {first.get('replayed', '?')}"
        )

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.required and not c.passed]

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    def failed_names(self) -> set[str]:
        return {c.name for c in self.failures}

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["passed"] = self.passed
        for item, check in zip(data["checks"], self.checks):
            item["verdict"] = check.verdict
        return data
