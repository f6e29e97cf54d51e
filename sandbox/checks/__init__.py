"""Self-test of a synthetic env (DESIGN.md §5): `validate_env` (or `avalidate_env` on a running loop) runs the checks and returns a ValidationReport."""

from sandbox.checks.contamination import SplitTexts
from sandbox.checks.report import CheckResult, ValidationReport
from sandbox.checks.runner import CHECKS, avalidate_env, validate_env
from sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds

__all__ = ["CHECKS", "CheckResult", "GRPOReadinessConfig", "SelfTestThresholds", "SplitTexts", "ValidationReport", "avalidate_env", "validate_env"]
