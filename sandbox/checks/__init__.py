"""The checks of an env's validation (sandbox/checks/README.md); `validate_env` (runner.py) runs them all."""

from gapforge.sandbox.checks.contamination import SplitTexts
from gapforge.sandbox.checks.report import CheckResult, ValidationReport
from gapforge.sandbox.checks.runner import CHECKS, validate_env
from gapforge.sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds

__all__ = [
    "CHECKS",
    "CheckResult",
    "GRPOReadinessConfig",
    "SelfTestThresholds",
    "SplitTexts",
    "ValidationReport",
    "validate_env",
]
