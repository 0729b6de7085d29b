"""awl's own agent over MCP, through the official MCP Python SDK: `ask_agent` with a
progress token gets a notification for each phase (and the reply's text as it
streams), then the answer with its plan; an agent token is refused, an unknown agent
is a tool error with its code.

Run by tests/it/agents.rs with AWL_MCP_URL, AWL_OPERATOR_TOKEN and AWL_AGENT_TOKEN set;
the server's agent `counter` talks to a scripted model that calls `word_count` once
and then answers "Four.".
"""

import asyncio
import sys

from lifecycle import CheckFailed, Progress, call, check, connect, env, refused


async def main() -> None:
    url = env("AWL_MCP_URL")
    async with connect(url, env("AWL_OPERATOR_TOKEN")) as op, connect(url, env("AWL_AGENT_TOKEN")) as agent:
        listed = {t.name for t in (await op.list_tools()).tools}
        check("ask_agent" in listed, f"ask_agent is not listed: {sorted(listed)}")
        progress = Progress()
        result = await call(
            op,
            "ask_agent",
            {"agent": "counter", "prompt": "How many words in 'a b c d'?"},
            progress_callback=progress,
        )
        check(result["status"] == "finished", f"the solve did not finish: {result}")
        check(result["message"] == "Four.", f"the answer: {result}")
        check(result["plan"][0]["tool"] == "word_count", f"the plan: {result['plan']}")
        check(result["plan"][0]["output"]["json"] == {"words": 4}, f"the tool's output: {result['plan']}")
        messages = [m or "" for _, m in progress.notes]
        check(any(m.startswith("started") for m in messages), f"no start in {messages}")
        check(any(m.startswith("plan 1: word_count") for m in messages), f"no plan in {messages}")
        check(any(m.startswith("execute: word_count ok") for m in messages), f"no execute in {messages}")
        check("Four." in "".join(messages), f"the reply's text did not stream: {messages}")
        check(messages[-1] == "finished", f"the last note: {messages}")
        check([p for p, _ in progress.notes] == sorted(p for p, _ in progress.notes), "progress only grows")
        await refused(agent, "ask_agent", {"agent": "counter", "prompt": "x"}, "forbidden")
        await refused(op, "ask_agent", {"agent": "nobody", "prompt": "x"}, "agent_not_found")
    print("ask_agent.py: ok")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except CheckFailed as e:
        print(f"ask_agent.py: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
