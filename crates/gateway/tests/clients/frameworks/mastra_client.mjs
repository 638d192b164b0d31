// Mastra's MCP client (npm `@mastra/mcp`) against oncerpc: an `MCPClient` with one server over
// HTTP (`url` and `requestInit`) or stdio (`command`), `listTools()` — the tools an Agent is
// given, named `<server>_<tool>` — each tool's input schema as the JSON schema a model gets
// (its Standard JSON Schema), and each call made as an agent makes it (`tool.execute`: the
// structured content, with the result's content and `_meta` on Mastra's hidden channels; an
// `isError` result throws, and its message is what the model reads). No model runs.
//
// Usage: node mastra_client.mjs http URL API_KEY KEY BY flaky|-
//        node mastra_client.mjs stdio ONCERPC CONFIG KEY BY flaky|-
import * as scenario from "./scenario.mjs";

const { MCPClient, getMcpCallToolContent, getMcpCallToolMeta } = await scenario.load("@mastra/mcp");

const { mode, where, auth, key, by, flaky } = scenario.args();
const server = mode === "stdio"
  ? { command: where, args: ["mcp", "--config", auth], timeout: 30_000 }
  : { url: new URL(where), requestInit: { headers: { Authorization: `Bearer ${auth}` } }, timeout: 30_000 };
const prefix = "oncerpc_";

await scenario.within(120_000, (async () => {
  const client = new MCPClient({ id: "oncerpc-test", servers: { oncerpc: server }, timeout: 30_000 });
  try {
    const listed = await client.listTools();
    const schemas = {};
    for (const [name, tool] of Object.entries(listed)) {
      const std = tool.inputSchema["~standard"];
      schemas[name] = std.jsonSchema ? std.jsonSchema.input({ target: "draft-2020-12" }) : null;
    }
    const call = async (name, args) => {
      try {
        const out = await listed[prefix + name].execute(args, {});
        const content = getMcpCallToolContent(out);
        if (content === undefined) { // no structured content: the whole CallToolResult
          return scenario.outcome(out?.isError ?? false, scenario.textOf(out?.content), out?.structuredContent, out?._meta ?? {});
        }
        return scenario.outcome(false, scenario.textOf(content), { ...out }, getMcpCallToolMeta(out) ?? {});
      } catch (e) {
        return scenario.outcome(true, String(e?.message ?? e));
      }
    };
    const calls = await scenario.run(call, key, by, flaky);
    const names = Object.keys(listed);
    const byTool = Object.fromEntries(Object.entries(schemas).map(([n, s]) => [n.slice(prefix.length), s]));
    scenario.report("@mastra/mcp", byTool, calls, { model_names: names.sort() });
  } finally {
    await client.disconnect();
  }
})());
