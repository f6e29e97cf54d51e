"""Self-test of a synthetic env: `validate_env` (or `avalidate_env` on a running loop) runs the checks and returns a ValidationReport.

The checks and their thresholds: sandbox/checks/README.md.
"""

from gapforge.sandbox.checks.contamination import SplitTexts
from gapforge.sandbox.checks.report import CheckResult, ValidationReport
from gapforge.sandbox.checks.runner import CHECKS, avalidate_env, validate_env
from gapforge.sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds

__all__ = [
    "CHECKS",
    "CheckResult",
    "GRPOReadinessConfig",
    "SelfTestThresholds",
    "SplitTexts",
    "ValidationReport",
    "avalidate_env",
    "validate_env",
]
