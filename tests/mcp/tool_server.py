#!/usr/bin/env python3
"""An MCP server with a few tools, for awl's registry to discover and call.

Run by the Rust integration tests `tests/it/mcp_tools.rs` with the official MCP Python
SDK (`AWL_TEST_PYTHON`, the virtualenv `scripts/test` sets up):

    python tool_server.py stdio          # MCP on stdin and stdout
    python tool_server.py http PORT      # streamable HTTP on 127.0.0.1:PORT/mcp

Over HTTP, PORT 0 takes a free port; either way the server prints its endpoint,
`tool_server: http://127.0.0.1:PORT/mcp`, on one line of stdout once it accepts
connections. With `TOOL_SERVER_TOKEN` set in its environment it answers only requests
carrying `Authorization: Bearer <that value>` (others get 401 with a
`WWW-Authenticate: Bearer` challenge).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("awl-test-tools", version="1.0.0")
calls = 0


def counted() -> None:
    global calls
    calls += 1


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    counted()
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Say a text louder: in capitals, with an exclamation mark."""
    counted()
    return text.upper() + "!"


@server.tool()
def fail(message: str) -> str:
    """Always fails, saying `message`."""
    counted()
    raise ToolError(message)


@server.tool()
async def slow(seconds: float) -> str:
    """Waits `seconds` seconds, then says so."""
    counted()
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def env(name: str) -> str:
    """The value of one of this process's environment variables, or `<unset>`."""
    counted()
    return os.environ.get(name, "<unset>")


@server.tool()
def whereami() -> dict:
    """This process's id and working directory."""
    counted()
    return {"pid": os.getpid(), "cwd": os.getcwd()}


@server.tool(name="files.count")
def files_count(directory: str) -> int:
    """How many entries a directory has (a name with a dot)."""
    counted()
    return len(os.listdir(directory))


@server.tool()
def call_count() -> int:
    """How many calls of the other tools this process has answered."""
    return calls


class RequireToken:
    """Refuses every HTTP request without the bearer token (ASGI middleware)."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if given != self.expected:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"www-authenticate", b'Bearer realm="tool_server"'),
                            (b"content-type", b"text/plain"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


async def serve_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app()
    token = os.environ.get("TOOL_SERVER_TOKEN")
    if token:
        app = RequireToken(app, token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    # Listening before uvicorn starts: a client that connects now waits in the
    # backlog rather than being refused.
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"tool_server: http://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "stdio":
        server.run("stdio")
    elif len(sys.argv) >= 3 and sys.argv[1] == "http":
        asyncio.run(serve_http(int(sys.argv[2])))
    else:
        sys.exit(f"usage: {sys.argv[0]} stdio | http PORT")


if __name__ == "__main__":
    main()
