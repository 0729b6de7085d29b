#!/usr/bin/env python3
"""A task's whole life over awl's MCP endpoint, driven by the official MCP Python SDK.

Run by the Rust integration test `tests/it/mcp.rs` (through `scripts/test`, which
provides the SDK in a virtualenv) against a running `awl serve`; it can also be run by
hand:

    AWL_MCP_URL=http://127.0.0.1:8080/mcp \
    AWL_OPERATOR_TOKEN=awl_... AWL_AGENT_TOKEN=awl_... AWL_AGENT_ID=py-agent \
    AWL_VIEWER_TOKEN=awl_... target/pyenv/bin/python tests/mcp/lifecycle.py

The agent token must be named AWL_AGENT_ID (agent tokens are named after their agent).
Every check that fails stops the run with a message on stderr and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

AGENT_TOOLS = {
    "register",
    "wait_for_prompt",
    "ack_task",
    "report_progress",
    "report_tool_call",
    "ask_question",
    "submit_for_review",
    "complete_task",
    "fail_task",
}
OPERATOR_TOOLS = {
    "send_task",
    "list_tasks",
    "start_run",
    "run_status",
    "approve_gate",
    "answer_question",
    "approve_task",
    "request_changes",
}


class CheckFailed(Exception):
    pass


CHECKS = 0


def check(condition: bool, what: str) -> None:
    global CHECKS
    CHECKS += 1
    if not condition:
        raise CheckFailed(what)


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise CheckFailed(f"the environment variable {name} is not set")
    return value


@asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                check(
                    init.server_info.name == "awl",
                    f"the server calls itself {init.server_info.name!r}, not 'awl'",
                )
                yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any], **kw: Any) -> dict:
    """Call a tool that must succeed: its structured result."""
    result = await session.call_tool(tool, args, **kw)
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise CheckFailed(f"{tool}({json.dumps(args)}) failed: {text}")
    check(
        isinstance(result.structured_content, dict),
        f"{tool} returned no structured result: {result}",
    )
    return result.structured_content


async def refused(session: ClientSession, tool: str, args: dict[str, Any], code: str) -> str:
    """Call a tool that must be refused with `code` (a tool error, not a crash)."""
    result = await session.call_tool(tool, args)
    check(result.is_error is True, f"{tool}({json.dumps(args)}) was not refused: {result}")
    text = " ".join(getattr(c, "text", "") for c in result.content)
    try:
        error = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckFailed(f"{tool}'s error is not {{'error': {{code, message}}}} ({e}): {text}")
    check(error.get("code") == code, f"{tool} was refused with {error}, expected code {code!r}")
    return error.get("message", "")


class Progress:
    def __init__(self) -> None:
        self.notes: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.notes.append((progress, message))


async def lifecycle() -> None:
    url = env("AWL_MCP_URL")
    operator_token = env("AWL_OPERATOR_TOKEN")
    agent_token = env("AWL_AGENT_TOKEN")
    agent_id = env("AWL_AGENT_ID")
    viewer_token = env("AWL_VIEWER_TOKEN")

    # No token, no connection: the auth middleware answers before MCP does.
    async with httpx2.AsyncClient() as raw:
        response = await raw.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        check(response.status_code == 401, f"/mcp without a token answered {response.status_code}")

    async with connect(url, operator_token) as op, connect(url, agent_token) as agent:
        # -- the tool list ------------------------------------------------------------
        tools = (await op.list_tools()).tools
        names = {t.name for t in tools}
        missing = (AGENT_TOOLS | OPERATOR_TOOLS) - names
        check(not missing, f"tools missing from tools/list: {sorted(missing)}")
        for t in tools:
            check(
                isinstance(t.input_schema, dict) and t.input_schema.get("type") == "object",
                f"tool {t.name} has no object input schema: {t.input_schema}",
            )
            check(bool(t.description), f"tool {t.name} has no description")
            check(t.output_schema is not None, f"tool {t.name} has no output schema")

        # -- register, and an empty wait that reports progress -------------------------
        me = await call(agent, "register", {"capabilities": ["python", "mcp"]})
        check(me["agent_id"] == agent_id, f"registered as {me['agent_id']}, not {agent_id}")
        check(me["status"] == "ACTIVE", f"the agent is {me['status']}")

        idle = Progress()
        started = time.monotonic()
        got = await call(
            agent, "wait_for_prompt", {"timeout_seconds": 5.5}, progress_callback=idle
        )
        waited = time.monotonic() - started
        check(got["task"] is None, f"an empty board gave a task: {got['task']}")
        check(5.0 <= waited < 15, f"a 5.5 s wait took {waited:.1f} s")
        check(
            len(idle.notes) >= 2,
            f"a 5.5 s wait sent {len(idle.notes)} progress notifications (expected one at "
            f"once and one every 5 s): {idle.notes}",
        )

        # -- send while the agent waits: the waiter gets it ----------------------------
        woken = Progress()
        waiting = asyncio.create_task(
            call(agent, "wait_for_prompt", {"timeout_seconds": 30}, progress_callback=woken)
        )
        await asyncio.sleep(0.3)
        sent = await call(
            op,
            "send_task",
            {
                "prompt": "Write the MCP lifecycle test",
                "capabilities": ["python"],
                "review_required": True,
            },
        )
        task_id = sent["task_id"]
        check(sent["status"] in ("QUEUED", "PENDING_ACK"), f"a sent task is {sent['status']}")
        got = await asyncio.wait_for(waiting, 20)
        task = got["task"]
        check(task is not None, "the waiting agent was not given the task it waited for")
        check(task["task_id"] == task_id, f"the agent got {task['task_id']}, not {task_id}")
        check(task["status"] == "PENDING_ACK", f"a delivered task is {task['status']}")
        check(task["assignee"] == agent_id, f"the task is held by {task['assignee']}")
        check(len(woken.notes) >= 1, "a wait with a progress token sent no progress")

        # -- work on it -----------------------------------------------------------------
        t = await call(agent, "ack_task", {"task_id": task_id})
        check(t["status"] == "IN_PROGRESS", f"an acked task is {t['status']}")
        t = await call(
            agent, "report_progress", {"task_id": task_id, "message": "reading", "percent": 40}
        )
        check(t["status"] == "IN_PROGRESS", f"progress moved the task to {t['status']}")
        t = await call(
            agent,
            "report_tool_call",
            {
                "task_id": task_id,
                "name": "bash",
                "parameters": {"cmd": "ls"},
                "duration_ms": 12,
                "success": True,
            },
        )
        check(t["version"] > sent["version"], "the tool call was not recorded")

        t = await call(
            agent, "ask_question", {"task_id": task_id, "question": "Postgres or SQLite?"}
        )
        check(t["status"] == "BLOCKED", f"a task with a question is {t['status']}")
        check(
            t["open_question"] and t["open_question"]["question"] == "Postgres or SQLite?",
            f"the open question is {t['open_question']}",
        )
        t = await call(op, "answer_question", {"task_id": task_id, "answer": "Both."})
        check(t["status"] == "IN_PROGRESS", f"an answered task is {t['status']}")

        t = await call(
            agent,
            "submit_for_review",
            {"task_id": task_id, "branch": "mcp", "commit": "abc123", "summary": "first try"},
        )
        check(t["status"] == "IN_REVIEW", f"a submitted task is {t['status']}")
        check(t["submission"]["summary"] == "first try", f"submission: {t['submission']}")

        # -- sent back with feedback: the next wait shows it ------------------------------
        t = await call(
            op, "request_changes", {"task_id": task_id, "feedback": "Cover the viewer too."}
        )
        check(t["status"] == "QUEUED", f"a task sent back is {t['status']}")
        got = await call(agent, "wait_for_prompt", {"timeout_seconds": 10})
        task = got["task"]
        check(task is not None and task["task_id"] == task_id, f"the requeued task: {task}")
        feedback = [f["feedback"] for f in task["feedback"]]
        check(
            feedback == ["Cover the viewer too."],
            f"the agent's wait_for_prompt does not carry the feedback: {task['feedback']}",
        )
        await call(agent, "ack_task", {"task_id": task_id})
        await call(agent, "submit_for_review", {"task_id": task_id, "summary": "second try"})
        t = await call(op, "approve_task", {"task_id": task_id})
        check(t["status"] == "APPROVED", f"an approved task is {t['status']}")
        t = await call(
            agent, "complete_task", {"task_id": task_id, "result": {"tests": "added"}}
        )
        check(t["status"] == "COMPLETED", f"a completed task is {t['status']}")
        check(t["result"] == {"tests": "added"}, f"the result is {t['result']}")
        check(t["review_rounds"] >= 1, f"review rounds: {t['review_rounds']}")

        # -- who may do what --------------------------------------------------------------
        await refused(agent, "wait_for_prompt", {"agent_id": "someone-else"}, "forbidden")
        await refused(
            agent, "complete_task", {"task_id": task_id, "agent_id": "someone-else"}, "forbidden"
        )
        await refused(agent, "send_task", {"prompt": "agents may not send"}, "forbidden")
        await refused(op, "wait_for_prompt", {}, "forbidden")
        # Board refusals are tool errors too: the task is over.
        await refused(agent, "ack_task", {"task_id": task_id}, "illegal_transition")
        # Arguments of the wrong shape: a tool error the model can act on.
        await refused(agent, "ack_task", {"task_id": "not-a-uuid"}, "invalid_request")
        await refused(op, "send_task", {"prompt": "x", "colour": "red"}, "invalid_request")

    async with connect(url, viewer_token) as viewer:
        await refused(viewer, "send_task", {"prompt": "viewers may not send"}, "forbidden")
        await refused(viewer, "answer_question", {"task_id": task_id, "answer": "no"}, "forbidden")
        page = await call(viewer, "list_tasks", {"status": "COMPLETED"})
        check(
            any(t["task_id"] == task_id for t in page["tasks"]),
            f"the viewer's list_tasks does not show the completed task: {page}",
        )


def report_causes(e: BaseException, indent: str) -> None:
    """The leaves of exception groups (anyio's task groups wrap the real error)."""
    for inner in getattr(e, "exceptions", ()):
        print(f"{indent}caused by {type(inner).__name__}: {inner}", file=sys.stderr)
        report_causes(inner, indent + "  ")


def main() -> int:
    # rmcp answers a session's DELETE with 202, which this SDK logs as a failed
    # termination; the session is ended all the same.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    try:
        asyncio.run(lifecycle())
    except CheckFailed as e:
        print(f"lifecycle.py: FAILED after {CHECKS} checks: {e}", file=sys.stderr)
        return 1
    except BaseException as e:  # an SDK or transport error is a failure too
        print(f"lifecycle.py: FAILED after {CHECKS} checks: {type(e).__name__}: {e}", file=sys.stderr)
        report_causes(e, "  ")
        return 1
    print(f"lifecycle.py: ok ({CHECKS} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
