// The official MCP TypeScript SDK v2 client (@modelcontextprotocol/client) with the official
// tasks extension (@modelcontextprotocol/ext-tasks) drives oncerpc's 2026-07-28 tasks over
// Streamable HTTP. The client discovers the server (server/discover) and ext-tasks runs the task
// protocol; ext-tasks needs the host to send its task requests itself (`rawDispatch`: the SDK's
// wire codec has no `resultType: "task"`), which this script does with fetch, as a host would.
//
// Usage: node mcp_ext_tasks_client.mjs MODE URL API_KEY ARG...   (NODE_PATH: the node_modules)
//   run TOOL KEY    call TOOL as a task with the idempotency key KEY, settle it; again with the
//                   same key; print both
//   start TOOL KEY  call TOOL as a task and leave it running (exit without closing); print its id
//   settle TASK     poll the task to its outcome (TaskController.result)
//   get TASK        one tasks/get (TaskController.snapshot), or the JSON-RPC error
//   cancel TASK     cancel the task, then one tasks/get
//   cancel-when DIR connect, write DIR/ready; when DIR/task appears, one tasks/get of the id it
//                   holds; when DIR/go appears, cancel that task, then one tasks/get (so that a
//                   test can time the reads and the cancellation without a process start)
// Prints one JSON object with what it saw.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.NODE_PATH;
const load = (file) => import(pathToFileURL(path.join(modules, file)).href);
const { Client, StreamableHTTPClientTransport } = await load("@modelcontextprotocol/client/dist/index.mjs");
const { createTaskSessionFromClient } = await load("@modelcontextprotocol/ext-tasks/dist/client/index.js");

const [mode, url, apiKey, ...rest] = process.argv.slice(2);
const VERSION = "2026-07-28";
const clientInfo = { name: "oncerpc-ext-tasks-test", version: "1.0.0" };

// The host's raw request path: one POST per request, with the revision's mirrored headers.
let nextId = 1;
async function rawDispatch(request, options = {}) {
  const headers = {
    Authorization: `Bearer ${apiKey}`,
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": request.method,
    ...(options.context?.headers ?? {}),
  };
  const name = request.params?.name ?? request.params?.taskId;
  if (typeof name === "string" && !Object.keys(headers).some((h) => h.toLowerCase() === "mcp-name")) {
    headers["Mcp-Name"] = name;
  }
  const body = JSON.stringify({ jsonrpc: "2.0", id: nextId++, ...request });
  const resp = await fetch(url, { method: "POST", headers, body, signal: options.signal });
  const text = await resp.text();
  // A JSON body, or an event stream whose last message is the answer.
  const json = resp.headers.get("content-type")?.startsWith("text/event-stream")
    ? text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5))).at(-1)
    : JSON.parse(text);
  return json.error ? { kind: "error", error: json.error } : { kind: "result", result: json.result };
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
});
const client = new Client(clientInfo, { versionNegotiation: { mode: { pin: VERSION } } });
await client.connect(transport);
const session = createTaskSessionFromClient(client, {
  endpointId: "oncerpc-test",
  rawDispatch,
  v2RequestFraming: { protocolVersion: VERSION, clientInfo, clientCapabilities: {} },
});

const view = (t) => (t ? { taskId: t.taskId, status: t.status } : null);
const outcome = (o) => ({
  status: o.status,
  structured: o.result?.structuredContent ?? null,
  is_error: o.result?.isError ?? null,
  key_status: o.result?._meta?.["io.oncerpc/idempotency-status"] ?? null,
  error: o.error ? { code: o.error.code ?? null, message: o.error.message } : null,
});
const refused = async (promise) => {
  try {
    return { ok: await promise };
  } catch (e) {
    return { error: { code: e.code ?? null, message: String(e.message) } };
  }
};

async function call(tool, key) {
  return session.callTool(tool, { sku: "A-1", idempotency_key: key }, { task: { preference: "require" } });
}

let summary;
switch (mode) {
  case "run": {
    const [tool, key] = rest;
    const runs = [];
    for (let i = 0; i < 2; i++) {
      const execution = await call(tool, key);
      const statuses = [];
      const settled = await execution.settle({
        onEvent: (e) => {
          if (e.type === "task") statuses.push(e.task.status);
        },
      });
      runs.push({
        kind: execution.kind,
        taskId: execution.handle?.taskId ?? null,
        statuses,
        outcome: outcome(settled.outcome),
      });
    }
    summary = { capabilities: session.capabilities, first: runs[0], again: runs[1] };
    break;
  }
  case "start": {
    const [tool, key] = rest;
    const execution = await call(tool, key);
    const reference = execution.kind === "task" ? execution.serializeReference() : null;
    // Leave it running: the process ends without closing the session (closing it cancels the
    // executions it owns), as a host that stops would.
    console.log(JSON.stringify({ kind: execution.kind, taskId: execution.handle?.taskId ?? null, reference }));
    process.exit(0);
  }
  case "settle": {
    const settled = await session.task(rest[0]).result();
    summary = outcome(settled);
    break;
  }
  case "get": {
    const got = await refused(session.task(rest[0]).snapshot());
    summary = got.ok ? view(got.ok) : got;
    break;
  }
  case "cancel": {
    const task = session.task(rest[0]);
    const cancelled = await refused(task.cancel());
    summary = { cancel: cancelled.error ?? "ok", after: view(await task.snapshot()) };
    break;
  }
  case "cancel-when": {
    const dir = rest[0];
    const appeared = async (name) => {
      for (let i = 0; i < 1500; i++) {
        if (fs.existsSync(path.join(dir, name))) return;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`${name} never appeared`);
    };
    fs.writeFileSync(path.join(dir, "ready"), "");
    await appeared("task");
    const task = session.task(fs.readFileSync(path.join(dir, "task"), "utf8").trim());
    const before = view(await task.snapshot());
    await appeared("go");
    const cancelled = await refused(task.cancel());
    summary = { before, cancel: cancelled.error ?? "ok", after: view(await task.snapshot()) };
    break;
  }
  default:
    throw new Error(`unknown mode ${mode}`);
}
console.log(JSON.stringify(summary));
await session.close();
await client.close();
