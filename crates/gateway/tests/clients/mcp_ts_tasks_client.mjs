// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, session era) drives oncerpc's
// session-era tasks (2025-11-25) over Streamable HTTP with its experimental tasks client.
//
// Usage: node mcp_ts_tasks_client.mjs URL API_KEY FLOW KEY   (NODE_PATH: the SDK's node_modules)
// Lists the tools, streams FLOW as a task with the idempotency key KEY to its result (the SDK
// polls tasks/get, then reads tasks/result), does it again with the same key, lists the tasks
// and tries to cancel the finished one; prints one JSON object with what it saw.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { CallToolResultSchema } = require("@modelcontextprotocol/sdk/types.js");

const [url, apiKey, flow, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
});
const client = new Client({ name: "oncerpc-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();

async function run() {
  const seen = { types: [], taskId: null, statuses: [], result: null };
  const stream = client.experimental.tasks.callToolStream(
    { name: flow, arguments: { sku: "A-1", idempotency_key: key } },
    CallToolResultSchema,
    { task: { ttl: 60000 } },
  );
  for await (const message of stream) {
    seen.types.push(message.type);
    if (message.type === "taskCreated") seen.taskId = message.task.taskId;
    if (message.type === "taskStatus") seen.statuses.push(message.task.status);
    if (message.type === "result") {
      seen.result = { is_error: message.result.isError ?? false, structured: message.result.structuredContent ?? null };
    }
    if (message.type === "error") seen.error = String(message.error);
  }
  return seen;
}

const refused = async (promise) => {
  try {
    await promise;
    return null;
  } catch (e) {
    return { code: e.code ?? null, message: String(e.message) };
  }
};

const first = await run();
const again = await run();
const listed = await client.experimental.tasks.listTasks();
console.log(JSON.stringify({
  capability: client.getServerCapabilities()?.tasks ?? null,
  task_support: tools.tools.find((t) => t.name === flow)?.execution?.taskSupport ?? null,
  first,
  again,
  listed: listed.tasks.map((t) => t.taskId),
  cancel_finished: await refused(client.experimental.tasks.cancelTask(first.taskId)),
  unknown: await refused(client.experimental.tasks.getTask("evt_00000000000000000000000000000000")),
}));
await client.close();
