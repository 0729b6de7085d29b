#!/usr/bin/env python3
"""Dispatch latency over MCP: how soon a waiting agent has a task after it is sent.

N agents (default 10) connect to `awl serve`'s /mcp with the official MCP Python SDK,
each with its own agent token (created here through the REST API with the admin token
given), and loop wait_for_prompt -> ack_task -> complete_task. The script then sends
tasks one at a time (over REST, or MCP send_task with --send mcp), each only once the
previous one was received, so agents are waiting when each task arrives. Everything
runs in this one asyncio process, so one clock times both ends:

- dispatch: from the send call returning to the agent's wait_for_prompt returning
  with that task (0 when the agent had it before the send's answer arrived);
- send-to-agent: from the send call starting to the same moment (includes the send).

See BENCHMARKS.md ("Agent board: dispatch over MCP") for the commands and figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> dict:
    result = await session.call_tool(tool, args)
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(f"{tool} failed: {text}")
    return result.structured_content


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(name: str, ms: list[float]) -> str:
    return (
        f"{name:>14}: p50 {pct(ms, 50):7.2f} ms  p90 {pct(ms, 90):7.2f} ms  "
        f"p99 {pct(ms, 99):7.2f} ms  max {max(ms):7.2f} ms  mean {statistics.fmean(ms):7.2f} ms"
    )


async def bench(args: argparse.Namespace) -> dict:
    base = args.url.rstrip("/")
    mcp_url = f"{base}/mcp"
    run = uuid.uuid4().hex[:8]
    capability = f"bench-{run}"
    admin = {"Authorization": f"Bearer {args.token}"}
    total = args.warmup + args.tasks
    received: dict[int, asyncio.Future[float]] = {}
    loop = asyncio.get_running_loop()
    for i in range(total):
        received[i] = loop.create_future()

    async with (
        httpx2.AsyncClient(base_url=base, headers=admin, timeout=30) as rest,
        contextlib.AsyncExitStack() as stack,
    ):
        tokens = []
        for n in range(args.agents):
            name = f"bench-{run}-{n}"
            r = await rest.post("/api/v1/tokens", json={"name": name, "role": "agent"})
            r.raise_for_status()
            tokens.append((name, r.json()["token"]))

        ready = asyncio.Semaphore(0)
        errors: list[BaseException] = []

        async def agent(token: str) -> None:
            try:
                async with connect(mcp_url, token) as s:
                    await call(s, "register", {"capabilities": [capability]})
                    ready.release()
                    while True:
                        got = await call(s, "wait_for_prompt", {"timeout_seconds": 30})
                        at = time.perf_counter()
                        task = got["task"]
                        if task is None:
                            continue
                        word = task["prompt"].rsplit(" ", 1)[1]
                        if word != "stop" and not received[int(word)].done():
                            received[int(word)].set_result(at)
                        await call(s, "ack_task", {"task_id": task["task_id"]})
                        await call(
                            s, "complete_task", {"task_id": task["task_id"], "result": word}
                        )
                        if word == "stop":
                            return
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                for f in received.values():
                    if not f.done():
                        f.set_exception(RuntimeError(f"an agent failed: {e!r}"))

        agents = [asyncio.create_task(agent(token)) for _, token in tokens]
        for _ in agents:
            await asyncio.wait_for(ready.acquire(), 30)
        await asyncio.sleep(0.5)  # every agent is in wait_for_prompt

        async def send_rest_prompt(prompt: str) -> None:
            r = await rest.post(
                "/api/v1/tasks", json={"prompt": prompt, "capabilities": [capability]}
            )
            r.raise_for_status()

        async def send_rest(i: int) -> None:
            await send_rest_prompt(f"bench {run} {i}")

        operator = None
        if args.send == "mcp":
            operator = await stack.enter_async_context(connect(mcp_url, args.token))

        async def send_mcp(i: int) -> None:
            assert operator is not None
            await call(
                operator,
                "send_task",
                {"prompt": f"bench {run} {i}", "capabilities": [capability]},
            )

        send = send_mcp if args.send == "mcp" else send_rest
        dispatch: list[float] = []
        end_to_end: list[float] = []
        early = 0
        started = time.perf_counter()
        for i in range(total):
            t0 = time.perf_counter()
            await send(i)
            t1 = time.perf_counter()
            at = await asyncio.wait_for(received[i], 10)
            if i < args.warmup:
                continue
            if at < t1:
                early += 1
            dispatch.append(max(0.0, at - t1) * 1000)
            end_to_end.append((at - t0) * 1000)
        elapsed = time.perf_counter() - started

        # One "stop" task per agent: each agent leaves after taking one.
        for _ in agents:
            await send_rest_prompt(f"bench {run} stop")
        await asyncio.wait_for(asyncio.gather(*agents, return_exceptions=True), 60)
        if errors:
            raise RuntimeError(f"agents failed: {errors!r}")

    return {
        "agents": args.agents,
        "tasks": args.tasks,
        "send": args.send,
        "dispatch_ms": dispatch,
        "end_to_end_ms": end_to_end,
        "received_before_send_returned": early,
        "seconds": elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the awl server")
    parser.add_argument("--token", required=True, help="an admin token (creates agent tokens)")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--send", choices=["rest", "mcp"], default="rest")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    # rmcp answers a session's DELETE with 202, which the SDK logs as a failure.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    out = asyncio.run(bench(args))
    d, e = out["dispatch_ms"], out["end_to_end_ms"]
    print(
        f"{out['tasks']} tasks to {out['agents']} MCP agents, sent over {out['send']}, "
        f"one at a time, in {out['seconds']:.1f} s"
    )
    print(summary("dispatch", d))
    print(summary("send-to-agent", e))
    print(f"  received before the send call returned: {out['received_before_send_returned']}")
    if args.json:
        print(json.dumps({k: v for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
