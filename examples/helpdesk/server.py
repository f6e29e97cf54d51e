"""The Northwind IT help desk as an MCP tool server (the `mcp` SDK's MCPServer, formerly FastMCP).

    python server.py               # stdio (what target.yaml starts)
    python server.py --http 8765   # streamable HTTP at http://127.0.0.1:8765/mcp

State lives in memory (desk.py) and starts the same every time; the hidden tool
`reset_state` puts it back to the start, which is how gapforge begins each episode.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from desk import Desk, DeskError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)

server = MCPServer(
    "northwind-helpdesk", instructions="IT help desk tools: employees, accounts, groups, tickets.", log_level="WARNING"
)
state = {"desk": Desk()}


def _run(method: str, *args: Any) -> dict:
    try:
        return getattr(state["desk"], method)(*args)
    except DeskError as err:
        raise ToolError(str(err)) from None


@server.tool(annotations=READ)
def find_employee(query: str) -> dict:
    """Search employees by (part of) a name, an exact email or an employee id. Returns the matches."""
    return _run("find_employee", query)


@server.tool(annotations=READ)
def get_account(employee_id: str) -> dict:
    """The account of an employee: username, kind (employee or contractor), contract end, lock state and reason,
    whether a password reset is pending, groups."""
    return _run("get_account", employee_id)


@server.tool(annotations=READ)
def list_groups() -> dict:
    """Every access group, whether employees may join it self-service, and what it grants."""
    return _run("list_groups")


@server.tool(annotations=READ)
def list_tickets(employee_id: str) -> dict:
    """The help-desk tickets of an employee, oldest first."""
    return _run("list_tickets", employee_id)


@server.tool(annotations=READ)
def get_ticket(ticket_id: str) -> dict:
    """One ticket by id (e.g. INC-12345)."""
    return _run("get_ticket", ticket_id)


@server.tool(annotations=WRITE)
def verify_identity(employee_id: str, badge_last4: str) -> dict:
    """Check a caller's identity: their employee id and the last four digits of their badge. Returns verified true/false."""
    return _run("verify_identity", employee_id, badge_last4)


@server.tool(annotations=WRITE)
def reset_password(employee_id: str) -> dict:
    """Send a password-reset link to the employee's email. Needs verify_identity of this employee first."""
    return _run("reset_password", employee_id)


@server.tool(annotations=WRITE)
def unlock_account(employee_id: str) -> dict:
    """Unlock a locked account. Needs verify_identity of this employee first."""
    return _run("unlock_account", employee_id)


@server.tool(annotations=WRITE)
def add_to_group(employee_id: str, group: str) -> dict:
    """Add the employee to an access group. Needs verify_identity of this employee first."""
    return _run("add_to_group", employee_id, group)


@server.tool(annotations=WRITE)
def create_ticket(employee_id: str, category: str, status: str, summary: str) -> dict:
    """Record a help-desk ticket. category: password | unlock | access | security; status: resolved | open | rejected.
    Returns the ticket with its id."""
    return _run("create_ticket", employee_id, category, status, summary)


@server.tool(annotations=WRITE)
def reset_state() -> dict:
    """Put the whole desk back to its initial state (the harness calls it before each episode)."""
    state["desk"] = Desk()
    return {"reset": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio"
    )
    args = parser.parse_args()
    desk = state["desk"]
    where = f"http://127.0.0.1:{args.http}/mcp" if args.http else "stdio"
    print(f"northwind-helpdesk: {len(desk.employees)} employees, serving on {where}", file=sys.stderr, flush=True)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
