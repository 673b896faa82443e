"""A small MCP server for the tests: ``add``, ``shout`` and ``fail``, plus test helpers.

Run it over stdio with ``python tests/mcp_server_example.py``, or over streamable HTTP on
``http://127.0.0.1:PORT/mcp`` with ``python tests/mcp_server_example.py --http PORT``.
"""

from __future__ import annotations

import argparse
import os

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("example", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Return the text in upper case, with an exclamation mark."""
    return f"{text.upper()}!"


@server.tool()
def fail(reason: str = "it went wrong") -> str:
    """Always fail, with the given reason."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
def pid() -> int:
    """The server's process id, so a test can stop the server."""
    return os.getpid()


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then say so: a slow tool for timeout tests."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header, or ``(none)`` (always ``(none)`` on stdio)."""
    return (ctx.headers or {}).get(name.lower(), "(none)")


def main() -> None:
    """Serve over stdio, or over streamable HTTP when ``--http PORT`` is given."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
