"""`generator_text(report)`: the feedback a rejected attempt with this self-test report sends the generator LLM."""

from gapforge.agents.synthesis.attempt import AttemptVerdict, findings
from gapforge.sandbox.checks.report import ValidationReport


def generator_text(report: ValidationReport) -> str:
    failed = report.failures
    names = [c.name for c in failed]
    return AttemptVerdict(accepted=False, stage="self_test", failed_checks=names, findings=findings(failed)).feedback()
