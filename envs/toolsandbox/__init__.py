"""Adapter to Apple's ToolSandbox (runs in its own venv, one worker process per env instance)."""

from gapforge.envs.toolsandbox.env import ToolSandboxEnv, UserSimulatorError, catalog, categories

__all__ = ["ToolSandboxEnv", "UserSimulatorError", "catalog", "categories"]
