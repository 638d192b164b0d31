"""The official MCP Python SDK (package `mcp`) as an agent reading what oncerpc re-exports
from an upstream MCP server besides its tools (tests/mcp_upstreams.rs): resources, a
resource template, a prompt and its completions.

Usage: mcp_upstream_offers_client.py URL PREFIX
Over Streamable HTTP (the session era) it reads the server's capabilities, lists the
resources, templates and prompts, reads `pay://terms` and a receipt through the template,
gets the prompt `{PREFIX}dispute` with arguments, completes its `reason` and a receipt id,
tries an unknown resource, a missing receipt and an unknown prompt (each error's code), then
calls `publish_statement` and waits for `notifications/resources/list_changed` on the
session's stream before listing the resources again. Prints one JSON object.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError
from mcp.types import PromptReference, ResourceTemplateReference, ServerNotification


async def code_of(call):
    try:
        await call
        return None
    except McpError as e:
        return {"code": e.error.code, "message": e.error.message}


async def main(url, prefix):
    changed = asyncio.Event()
    heard = []

    async def on_message(message):
        if isinstance(message, ServerNotification):
            heard.append(message.root.method)
            if message.root.method == "notifications/resources/list_changed":
                changed.set()

    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            caps = init.capabilities.model_dump(exclude_none=True)
            resources = (await session.list_resources()).resources
            templates = (await session.list_resource_templates()).resourceTemplates
            prompts = (await session.list_prompts()).prompts
            terms = await session.read_resource("pay://terms")
            receipt = await session.read_resource("pay://receipts/r-7")
            prompt = await session.get_prompt(f"{prefix}dispute", {"charge_id": "ch-1", "reason": "fraudulent"})
            reason = await session.complete(
                PromptReference(type="ref/prompt", name=f"{prefix}dispute"), {"name": "reason", "value": "d"}
            )
            receipt_ids = await session.complete(
                ResourceTemplateReference(type="ref/resource", uri="pay://receipts/{receipt_id}"),
                {"name": "receipt_id", "value": "r-1"},
            )
            unknown = await code_of(session.read_resource("nope://nothing"))
            missing = await code_of(session.read_resource("pay://receipts/missing"))
            no_prompt = await code_of(session.get_prompt("no_such_prompt", {}))
            # A list that changes on the upstream: the session's stream says so.
            await session.call_tool("publish_statement", {"idempotency_key": "publish-1"})
            try:
                await asyncio.wait_for(changed.wait(), 30)
            except asyncio.TimeoutError:
                pass
            after = (await session.list_resources()).resources
            print(json.dumps({
                "capabilities": sorted(caps.keys()),
                "resources": sorted(str(r.uri) for r in resources),
                "templates": [t.uriTemplate for t in templates],
                "prompts": [{"name": p.name, "arguments": [a.name for a in (p.arguments or [])]} for p in prompts],
                "terms": [c.text for c in terms.contents],
                "receipt": json.loads(receipt.contents[0].text),
                "prompt": [m.content.text for m in prompt.messages],
                "reason": reason.completion.values,
                "receipt_ids": receipt_ids.completion.values,
                "unknown": unknown,
                "missing": missing,
                "no_prompt": no_prompt,
                "list_changed": changed.is_set(),
                "heard": heard,
                "after": sorted(str(r.uri) for r in after),
            }))


asyncio.run(main(sys.argv[1], sys.argv[2]))
