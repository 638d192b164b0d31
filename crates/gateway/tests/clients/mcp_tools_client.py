"""The official MCP Python SDK (package `mcp`) lists oncerpc's tools and calls them by their
model-safe names, with the arguments their schemas list.

Usage: mcp_tools_client.py stdio ONCERPC_BINARY CONFIG KEY BY
       mcp_tools_client.py http URL API_KEY KEY BY
It lists every tool (all pages, as the SDK parsed them), reads `counter_get`, calls
`counter_increment` with `by` = BY and the idempotency key KEY, reads `counter_get` again,
calls `sum` with `values` and `counter.increment` by its method's own name (accepted for one
release), and prints one JSON object with what it saw.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


def summary(result):
    meta = result.meta or {}
    return {
        "is_error": result.isError,
        "text": result.content[0].text if result.content else None,
        "structured": result.structuredContent,
        "status": meta.get("io.oncerpc/idempotency-status"),
    }


async def drive(read, write, key, by):
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        tools, cursor = [], None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        before = await session.call_tool("counter_get", {})
        increment = await session.call_tool("counter_increment", {"by": by, "idempotency_key": key})
        after = await session.call_tool("counter_get", {})
        total = await session.call_tool("sum", {"values": [1, 2, 4]})
        dotted = await session.call_tool("counter.increment", {"by": 1, "idempotency_key": key + "-dotted"})
        print(json.dumps({
            "protocol": init.protocolVersion,
            "tools": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools],
            "before": summary(before),
            "increment": summary(increment),
            "after": summary(after),
            "sum": summary(total),
            "dotted": summary(dotted),
        }))


async def main(mode, where, auth, key, by):
    if mode == "stdio":
        params = StdioServerParameters(command=where, args=["mcp", "--config", auth])
        async with stdio_client(params) as (read, write):
            await drive(read, write, key, int(by))
    else:
        headers = {"Authorization": f"Bearer {auth}"}
        async with streamablehttp_client(where, headers=headers) as (read, write, _session_id):
            await drive(read, write, key, int(by))


asyncio.run(main(*sys.argv[1:6]))
