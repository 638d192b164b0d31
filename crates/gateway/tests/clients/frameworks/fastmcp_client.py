"""fastmcp's Client (PyPI `fastmcp`) against oncerpc, over Streamable HTTP or stdio.

Usage: fastmcp_client.py http URL API_KEY KEY BY flaky|-
       fastmcp_client.py stdio ONCERPC CONFIG KEY BY flaky|-
Lists the tools (fastmcp's Tool objects, all pages) and runs scenario.py's calls with
`Client.call_tool(..., raise_on_error=False)`, whose result carries `_meta` and the
structured content.
"""
import asyncio

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

import scenario


async def main():
    mode, where, auth, key, by, flaky = scenario.args()
    if mode == "stdio":
        transport = StdioTransport(command=where, args=["mcp", "--config", auth], keep_alive=False)
    else:
        transport = StreamableHttpTransport(where, headers={"Authorization": f"Bearer {auth}"})
    async with Client(transport, timeout=30) as client:
        listed = await client.list_tools()
        tools = {t.name: t.inputSchema for t in listed}

        async def call(name, arguments):
            r = await client.call_tool(name, arguments, raise_on_error=False)
            return scenario.outcome(r.is_error, scenario.text_of(r.content), r.structured_content, r.meta or {})

        calls = await scenario.run(call, key, by, flaky)
    scenario.report("fastmcp", tools, calls)


asyncio.run(main())
