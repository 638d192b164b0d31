"""The official MCP Python SDK (package `mcp`) drives oncerpc's MCP door.

Usage: mcp_client.py stdio ONCERPC_BINARY CONFIG KEY
       mcp_client.py http URL API_KEY KEY
Over stdio it starts `oncerpc mcp` as a desktop host would; over HTTP it connects to `/mcp`
(Streamable HTTP, the API key as a Bearer token). Either way it lists the tools, calls the
`orders_create` tool (the `orders.create` command) twice with the same key and once with the same key but other
arguments, calls the `subtract` query, and prints one JSON object with what it saw (the Rust test asserts on it and on the upstream's
count of calls).
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
        "key": meta.get("io.oncerpc/idempotency-key"),
    }


async def drive(read, write, key):
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        create = next(t for t in tools.tools if t.name == "orders_create")
        args = {"sku": "A-1", "idempotency_key": key}
        first = await session.call_tool("orders_create", args)
        again = await session.call_tool("orders_create", args)
        other = await session.call_tool("orders_create", {"sku": "B-2", "idempotency_key": key})
        query = await session.call_tool("subtract", {"minuend": 7, "subtrahend": 2})
        print(json.dumps({
            "protocol": init.protocolVersion,
            "server": init.serverInfo.name,
            "tools": sorted(t.name for t in tools.tools),
            "key_property": "idempotency_key" in create.inputSchema.get("properties", {}),
            "idempotent_hint": create.annotations.idempotentHint if create.annotations else None,
            "first": summary(first),
            "again": summary(again),
            "other": summary(other),
            "query": summary(query),
        }))


async def main(mode, where, auth, key):
    if mode == "stdio":
        params = StdioServerParameters(command=where, args=["mcp", "--config", auth])
        async with stdio_client(params) as (read, write):
            await drive(read, write, key)
    else:
        headers = {"Authorization": f"Bearer {auth}"}
        async with streamablehttp_client(where, headers=headers) as (read, write, _session_id):
            await drive(read, write, key)


asyncio.run(main(*sys.argv[1:5]))
