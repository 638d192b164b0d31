"""Pydantic AI (PyPI `pydantic-ai-slim[mcp]`) against oncerpc: an `Agent` with a
`pydantic_ai.mcp.MCPToolset` (2.x's one MCP class; `MCPServerStreamableHTTP` and
`MCPServerStdio` were folded into it) on the URL or on a stdio transport, run by Pydantic AI's
own `FunctionModel`: the function sees the tool definitions the agent hands a model and calls
one tool per run, as a model would, then answers with text. No LLM: there is no network.

Usage: pydantic_ai_client.py http URL API_KEY KEY BY flaky|-
       pydantic_ai_client.py stdio ONCERPC CONFIG KEY BY flaky|-
Prints the tool definitions' names and `parameters_json_schema` and scenario.py's calls, each
read from the run's `ToolReturnPart` (Pydantic AI hands a model no `_meta`).
"""
import asyncio

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import scenario

definitions = {}


async def main():
    mode, where, auth, key, by, flaky = scenario.args()
    if mode == "stdio":
        toolset = MCPToolset(StdioTransport(command=where, args=["mcp", "--config", auth], keep_alive=False),
                             read_timeout=30)
    else:
        toolset = MCPToolset(where, headers={"Authorization": f"Bearer {auth}"}, read_timeout=30)
    planned = {}

    def model(messages, info: AgentInfo):
        definitions.update({t.name: t.parameters_json_schema for t in info.function_tools})
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        if returns:
            planned["returned"] = returns[0]
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(planned["name"], planned["arguments"])])

    agent = Agent(FunctionModel(model), toolsets=[toolset])
    async with agent:
        async def call(name, arguments):
            planned.clear()
            planned.update(name=name, arguments=arguments)
            await agent.run(f"call {name}")
            part = planned["returned"]
            failed = getattr(part, "outcome", "success") != "success"
            content = part.content
            structured = content if isinstance(content, dict) else None
            return scenario.outcome(failed, part.model_response_str(), structured)

        calls = await scenario.run(call, key, by, flaky)
    scenario.report("pydantic-ai-slim", definitions, calls)


asyncio.run(main())
