"""The OpenAI Agents SDK (PyPI `openai-agents`) against oncerpc: `agents.mcp.MCPServerStreamableHttp`
or `MCPServerStdio`, an `Agent` with the server and strict schemas, and the function tools the
agent hands its model (`Agent.get_all_tools`), each invoked as the runner does
(`FunctionTool.on_invoke_tool` with a `ToolContext` and the model's JSON arguments). No model
runs: there is no network.

Usage: openai_agents_client.py http URL API_KEY KEY BY flaky|-
       openai_agents_client.py stdio ONCERPC CONFIG KEY BY flaky|-
Prints the tools' names and `params_json_schema` (strict), whether each converted to strict
mode, `ensure_strict_json_schema` of the raw `counter_increment` schema, and scenario.py's calls,
each sent as a strict-mode model sends it (every property: `force_retry: false` when not
retrying); a result's `_meta` is read through the server's `custom_data_extractor` hook.
"""
import asyncio
import copy
import json

from agents import Agent, RunContextWrapper
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext

import scenario

seen = {}


def keep_meta(ctx):
    """The SDK's hook for what a result carries beside the model's output (`_meta`, `isError`)."""
    seen[ctx.run_context.tool_call_id] = ctx
    return {"idempotency_status": (ctx.result_meta or {}).get("io.oncerpc/idempotency-status")}


async def main():
    mode, where, auth, key, by, flaky = scenario.args()
    if mode == "stdio":
        server = MCPServerStdio(
            params={"command": where, "args": ["mcp", "--config", auth]},
            name="oncerpc",
            client_session_timeout_seconds=30,
            custom_data_extractor=keep_meta,
        )
    else:
        server = MCPServerStreamableHttp(
            params={"url": where, "headers": {"Authorization": f"Bearer {auth}"}, "timeout": 30},
            name="oncerpc",
            client_session_timeout_seconds=30,
            custom_data_extractor=keep_meta,
        )
    async with server:
        agent = Agent(name="oncerpc", mcp_servers=[server], mcp_config={"convert_schemas_to_strict": True})
        function_tools = {t.name: t for t in await agent.get_all_tools(RunContextWrapper(context=None))}
        raw = {t.name: t.inputSchema for t in await server.list_tools()}
        ids = iter(range(1, 1000))

        async def call(name, arguments):
            tool = function_tools[name]
            call_id = f"call_{next(ids)}"
            # A model under strict mode sends every property the schema requires, all of them:
            # `force_retry: false` on a plain call.
            required = tool.params_json_schema.get("required", [])
            arguments = {**({"force_retry": False} if "force_retry" in required else {}), **arguments}
            payload = json.dumps(arguments)
            ctx = ToolContext(context=None, tool_name=name, tool_call_id=call_id, tool_arguments=payload)
            out = await tool.on_invoke_tool(ctx, payload)
            hook = seen.get(call_id)
            if hook is None:  # the SDK's own failure text (the call raised): no result to read
                return scenario.outcome(True, scenario.text_of(out))
            structured = dict(hook.structured_content) if hook.structured_content is not None else None
            return scenario.outcome(hook.is_error, scenario.text_of(out), structured, dict(hook.result_meta or {}))

        calls = await scenario.run(call, key, by, flaky)
    scenario.report(
        "openai-agents",
        {n: t.params_json_schema for n, t in function_tools.items()},
        calls,
        strict={n: t.strict_json_schema for n, t in function_tools.items()},
        ensure_strict=ensure_strict_json_schema(copy.deepcopy(raw["counter_increment"])),
    )


asyncio.run(main())
