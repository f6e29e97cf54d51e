"""Self-test of a synthetic env (DESIGN.md §5): `validate_env` runs the checks and returns a ValidationReport."""

from sandbox.checks.report import CheckResult, ValidationReport
from sandbox.checks.runner import CHECKS, validate_env
from sandbox.checks.settings import GRPOReadinessConfig, SelfTestThresholds

__all__ = ["CHECKS", "CheckResult", "GRPOReadinessConfig", "SelfTestThresholds", "ValidationReport", "validate_env"]
