"""The official MCP Python SDK (package `mcp`, its experimental tasks client) drives oncerpc's
session-era tasks (2025-11-25).

Usage: mcp_tasks_client.py http URL API_KEY FLOW QUERY KEY
       mcp_tasks_client.py stdio ONCERPC_BINARY CONFIG FLOW QUERY KEY
It initializes a session, lists the tools, calls FLOW as a task with the idempotency key KEY
(and a progressToken), calls it again with the same key, waits for its result (tasks/result),
polls it, reads its result again, lists the tasks, and tries what must be refused: cancelling the finished task,
an unknown task id, QUERY as a task. Then it starts a second task (key KEY-c) and cancels it at
once. It prints one JSON object with what it saw (the notifications too); the Rust test asserts on it and on the
upstream's count of calls per step.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


async def refused(call):
    try:
        await call
    except McpError as e:
        return {"code": e.error.code, "message": e.error.message}
    return None


def result_summary(result):
    return {
        "is_error": result.isError,
        "text": result.content[0].text if result.content else None,
        "structured": result.structuredContent,
        "related_task": (result.meta or {}).get("io.modelcontextprotocol/related-task"),
    }


async def drive(read, write, flow, query, key):
    notes = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            notes.append(message.root.model_dump(mode="json", by_alias=True, exclude_none=True))

    async with ClientSession(read, write, message_handler=on_message) as session:
        init = await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        tasks = session.experimental
        args = {"sku": "A-1", "idempotency_key": key}
        created = await tasks.call_tool_as_task(flow, args, ttl=60000, meta={"progressToken": "p-" + key})
        again = await tasks.call_tool_as_task(flow, args, ttl=60000)
        task_id = created.task.taskId
        # tasks/result waits for the running task (and tells its status before answering).
        first = await tasks.get_task_result(task_id, types.CallToolResult)
        statuses = [s.status async for s in tasks.poll_task(task_id)]
        second = await tasks.get_task_result(task_id, types.CallToolResult)
        listed = await tasks.list_tasks()
        got = await tasks.get_task(task_id)

        cancel_args = {"sku": "C-1", "idempotency_key": key + "-c"}
        to_cancel = await tasks.call_tool_as_task(flow, cancel_args)
        cancelled = await tasks.cancel_task(to_cancel.task.taskId)
        after_cancel = await tasks.get_task(to_cancel.task.taskId)
        cancelled_result = await tasks.get_task_result(to_cancel.task.taskId, types.CallToolResult)

        print(json.dumps({
            "protocol": init.protocolVersion,
            "capability": init.capabilities.tasks.model_dump(exclude_none=True) if init.capabilities.tasks else None,
            "task_support": {
                name: (t.execution.taskSupport if t.execution else None) for name, t in tools.items()
            },
            "created": created.task.model_dump(mode="json", exclude_none=True),
            "created_meta": created.meta,
            "again": again.task.taskId,
            "statuses": statuses,
            "got": got.model_dump(mode="json", exclude_none=True),
            "result": result_summary(first),
            "result_again_same": first.model_dump_json() == second.model_dump_json(),
            "listed": [t.taskId for t in listed.tasks],
            "listed_status": {t.taskId: t.status for t in listed.tasks},
            "cancel_finished": await refused(tasks.cancel_task(task_id)),
            "unknown": await refused(tasks.get_task("evt_00000000000000000000000000000000")),
            "unknown_result": await refused(tasks.get_task_result("nope", types.CallToolResult)),
            "query_as_task": await refused(tasks.call_tool_as_task(query, {})),
            "query_inline": (await session.call_tool(query, {})).isError,
            "cancel": {
                "id": to_cancel.task.taskId,
                "answer": cancelled.status,
                "after": after_cancel.status,
                "message": after_cancel.statusMessage,
                "result": result_summary(cancelled_result),
                "again": await refused(tasks.cancel_task(to_cancel.task.taskId)),
            },
            "notifications": notes,
        }))


async def main(mode, where, auth, flow, query, key):
    if mode == "stdio":
        params = StdioServerParameters(command=where, args=["mcp", "--config", auth])
        async with stdio_client(params) as (read, write):
            await drive(read, write, flow, query, key)
    else:
        headers = {"Authorization": f"Bearer {auth}"}
        async with streamablehttp_client(where, headers=headers) as (read, write, _session_id):
            await drive(read, write, flow, query, key)


asyncio.run(main(*sys.argv[1:7]))
