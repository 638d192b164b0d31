"""LangChain's MCP adapters (PyPI `langchain-mcp-adapters`) against oncerpc: a
`MultiServerMCPClient`, its LangChain tools, each schema as LangChain hands it to a model
(`convert_to_openai_tool`, what `bind_tools` sends), and each tool run as an agent runs it
(`tool.ainvoke` with the model's tool call: a `ToolMessage` with the content, the structured
content as its artifact, and `status`). No model runs: there is no network.

Usage: langchain_client.py http URL API_KEY KEY BY flaky|-
       langchain_client.py stdio ONCERPC CONFIG KEY BY flaky|-
Over HTTP the tools come from `get_tools()` (a session per call). Over stdio they come from one
`client.session(...)` (`load_mcp_tools`): `get_tools()` would start `oncerpc mcp` once per call,
and the demo counter `counter_get` reads lives in one process. LangChain hands a model no `_meta`.
"""
import asyncio
from contextlib import AsyncExitStack

from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

import scenario


async def main():
    mode, where, auth, key, by, flaky = scenario.args()
    async with AsyncExitStack() as stack:
        if mode == "stdio":
            client = MultiServerMCPClient(
                {"oncerpc": {"transport": "stdio", "command": where, "args": ["mcp", "--config", auth]}}
            )
            session = await stack.enter_async_context(client.session("oncerpc"))
            tools = await load_mcp_tools(session, server_name="oncerpc")
        else:
            client = MultiServerMCPClient(
                {"oncerpc": {"transport": "streamable_http", "url": where,
                             "headers": {"Authorization": f"Bearer {auth}"}}}
            )
            tools = await client.get_tools()
        by_name = {t.name: t for t in tools}
        for_model = {t.name: convert_to_openai_tool(t)["function"] for t in tools}
        ids = iter(range(1, 1000))

        async def call(name, arguments):
            msg = await by_name[name].ainvoke(
                {"name": name, "args": arguments, "id": f"call_{next(ids)}", "type": "tool_call"}
            )
            artifact = msg.artifact or {}
            structured = artifact.get("structured_content") if isinstance(artifact, dict) else None
            return scenario.outcome(msg.status == "error", scenario.text_of(msg.content), structured)

        calls = await asyncio.wait_for(scenario.run(call, key, by, flaky), 120)
    scenario.report(
        "langchain-mcp-adapters",
        {n: f["parameters"] for n, f in for_model.items()},
        calls,
        model_names=sorted(f["name"] for f in for_model.values()),
    )


asyncio.run(main())
