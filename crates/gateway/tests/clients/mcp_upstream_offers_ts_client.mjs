// The official MCP TypeScript SDK as an agent using what oncerpc re-exports from an upstream
// MCP server besides its tools (tests/mcp_upstreams.rs): resources, a resource template, a
// prompt and its completions — and a call it cancels.
//
// Usage: node mcp_upstream_offers_ts_client.mjs ERA URL [KEY LOG]
//   (NODE_PATH: the node_modules holding the SDK: @modelcontextprotocol/sdk for ERA
//   "session", the v2 client @modelcontextprotocol/client pinned to 2026-07-28 for "2026")
// Lists the resources, templates and prompts, reads `pay://terms` and a receipt through the
// template, gets the prompt `dispute`, completes its `reason`, and tries an unknown resource
// and an unknown prompt (their error codes). With KEY and LOG (session era): calls
// `slow_charge` with KEY, waits until the upstream's LOG shows it running, then aborts it
// (the SDK sends notifications/cancelled). Prints one JSON object.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const [era, url, key, log] = process.argv.slice(2);

let client;
if (era === "2026") {
  const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");
  client = new Client({ name: "oncerpc-offers-2026", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
} else {
  const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
  client = new Client({ name: "oncerpc-offers", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
}

const codeOf = async (promise) => {
  try {
    await promise;
    return null;
  } catch (e) {
    return e.code ?? String(e);
  }
};

const caps = client.getServerCapabilities() ?? {};
const resources = (await client.listResources()).resources.map((r) => r.uri).sort();
const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
const terms = (await client.readResource({ uri: "pay://terms" })).contents.map((c) => c.text);
const receipt = JSON.parse((await client.readResource({ uri: "pay://receipts/r-9" })).contents[0].text);
const prompt = await client.getPrompt({ name: "dispute", arguments: { charge_id: "ch-2" } });
const reason = await client.complete({
  ref: { type: "ref/prompt", name: "dispute" },
  argument: { name: "reason", value: "f" },
});
const unknown = await codeOf(client.readResource({ uri: "nope://nothing" }));
const noPrompt = await codeOf(client.getPrompt({ name: "no_such_prompt" }));

let cancelled = null;
if (key && log) {
  // Abort the call once the upstream runs it: the SDK sends notifications/cancelled.
  const abort = new AbortController();
  const calling = client.callTool(
    { name: "slow_charge", arguments: { amount: 3, idempotency_key: key } },
    undefined,
    { signal: abort.signal },
  );
  const running = () => readFileSync(log, "utf8").split("\n").some((l) => l.includes('"slow_charge"') && l.includes('"amount": 3'));
  for (let i = 0; i < 600 && !running(); i++) await new Promise((r) => setTimeout(r, 50));
  abort.abort("the user changed their mind");
  cancelled = await codeOf(calling);
}

console.log(JSON.stringify({
  capabilities: Object.keys(caps).sort(),
  resources,
  templates,
  prompts,
  terms,
  receipt,
  prompt: prompt.messages.map((m) => m.content.text),
  reason: reason.completion.values,
  unknown,
  no_prompt: noPrompt,
  cancelled,
}));
await client.close();
