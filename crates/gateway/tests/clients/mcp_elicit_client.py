"""The official MCP Python SDK (package `mcp`) answers the questions a flow asks (elicitation).

Usage: mcp_elicit_client.py http URL API_KEY TOOL KEY ANSWER [CALLS]
       mcp_elicit_client.py stdio ONCERPC_BINARY CONFIG TOOL KEY ANSWER [CALLS]
ANSWER is how its elicitation callback answers: `accept` (content {"size": "M"}), `decline`,
`cancel`, or `none`: no callback at all, so the client declares no elicitation capability.
It calls TOOL with {"sku": "A-1"} and idempotency key KEY CALLS times (default 1), and prints
one JSON object: how often it was asked, the questions, and each call's result. Each time it is
asked it also prints a line `asked` on stderr at once (a test that kills the gateway watches
for it).
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
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


async def drive(read, write, tool, key, answer, calls):
    asked = []

    async def elicit(context, params):
        asked.append({"message": params.message, "schema": params.requestedSchema})
        print("asked", file=sys.stderr, flush=True)
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"size": "M"})
        return types.ElicitResult(action=answer)

    callback = None if answer == "none" else elicit
    async with ClientSession(read, write, elicitation_callback=callback) as session:
        await session.initialize()
        results = []
        for _ in range(calls):
            result = await session.call_tool(tool, {"sku": "A-1", "idempotency_key": key})
            results.append(summary(result))
        print(json.dumps({"asked": len(asked), "questions": asked, "results": results}))


async def main(mode, where, auth, tool, key, answer, calls):
    if mode == "stdio":
        params = StdioServerParameters(command=where, args=["mcp", "--config", auth])
        async with stdio_client(params) as (read, write):
            await drive(read, write, tool, key, answer, calls)
    else:
        headers = {"Authorization": f"Bearer {auth}"}
        async with streamablehttp_client(where, headers=headers) as (read, write, _):
            await drive(read, write, tool, key, answer, calls)


if __name__ == "__main__":
    args = sys.argv[1:]
    calls = int(args[6]) if len(args) > 6 else 1
    asyncio.run(main(*args[:6], calls))
