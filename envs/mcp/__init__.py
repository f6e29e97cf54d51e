"""A target environment from an MCP tool server plus a YAML task file (`--env mcp:PATH.yaml`).

Importing this package imports the `mcp` SDK (extra `mcp`); envs.registry turns its
absence into a one-line error naming the extra.
"""

from gapforge.envs.mcp.env import McpTargetEnv

__all__ = ["McpTargetEnv"]
