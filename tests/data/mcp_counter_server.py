"""A tiny MCP server for the MCP target's tests: a counter, its process id, and a tool that makes it die."""

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("counter", log_level="WARNING")
state = {"n": 0}


@server.tool(annotations=ToolAnnotations(read_only_hint=False))
def bump() -> dict:
    """Add one to the counter."""
    state["n"] += 1
    return {"n": state["n"]}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_counter() -> dict:
    """The counter and this server's process id."""
    return {"n": state["n"], "pid": os.getpid()}


@server.tool()
def crash(reason: str) -> dict:
    """Write the reason to stderr and end the process at once."""
    print(f"fatal: {reason}", file=sys.stderr, flush=True)
    os._exit(1)


@server.tool()
def reset_state() -> dict:
    """Counter back to 0."""
    state["n"] = 0
    return {"n": 0}


if __name__ == "__main__":
    print("counter server up", file=sys.stderr, flush=True)
    server.run("stdio")
