"""The official MCP Python SDK (package `mcp`) as an agent calling the tools oncerpc
re-exports from an upstream MCP server (tests/mcp_upstreams.rs).

Usage: mcp_upstream_client.py URL KEY [extras]
Over Streamable HTTP it lists the tools, calls `charge` twice with KEY, once with KEY and
other arguments, 50 times at once with another key, and the read-only `balance` twice; it
prints one JSON object with what it saw. With `extras`: calls `ship` (key KEY) with a
progress callback, and `charge` twice with the same arguments and no key at all.
"""
import asyncio
import json
import sys

from mcp import ClientSession
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


async def main(url, key):
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            charge = tools["charge"]
            args = {"amount": 5, "card": "visa", "idempotency_key": key}
            first = await session.call_tool("charge", args)
            again = await session.call_tool("charge", args)
            other = await session.call_tool("charge", {"amount": 7, "card": "visa", "idempotency_key": key})
            many = await asyncio.gather(*[
                session.call_tool("charge", {"amount": 9, "card": "amex", "idempotency_key": key + "-many"})
                for _ in range(50)
            ])
            balance = [await session.call_tool("balance", {}) for _ in range(2)]
            print(json.dumps({
                "tools": sorted(tools),
                "charge_key_property": "idempotency_key" in charge.inputSchema.get("properties", {}),
                "charge_description": charge.description,
                "balance_read_only": tools["balance"].annotations.readOnlyHint if tools["balance"].annotations else None,
                "first": summary(first),
                "again": summary(again),
                "other": summary(other),
                "many": [summary(m) for m in many],
                "balance": [summary(b) for b in balance],
            }))


async def extras(url, key):
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            progress = []

            async def on_progress(done, total, message):
                progress.append([done, total, message])

            shipped = await session.call_tool(
                "ship", {"order": "o-1", "region": "eu", "idempotency_key": key}, progress_callback=on_progress
            )
            unkeyed = [await session.call_tool("charge", {"amount": 11, "card": "jcb"}) for _ in range(2)]
            print(json.dumps({
                "ship": summary(shipped),
                "progress": progress,
                "unkeyed": [summary(u) for u in unkeyed],
            }))


if len(sys.argv) > 3 and sys.argv[3] == "extras":
    asyncio.run(extras(sys.argv[1], sys.argv[2]))
else:
    asyncio.run(main(sys.argv[1], sys.argv[2]))
