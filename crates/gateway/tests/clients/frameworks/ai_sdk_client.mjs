// The AI SDK's MCP client (npm `@ai-sdk/mcp`) against oncerpc: `createMCPClient` over HTTP (its
// `http` transport) or stdio (`Experimental_StdioMCPTransport`), `tools()` — the tool set handed
// to `generateText` — each tool's `inputSchema` as the JSON schema a model gets, and each call
// made as the SDK makes it for a model (`execute`, then `toModelOutput`). No model runs.
//
// Usage: node ai_sdk_client.mjs http URL API_KEY KEY BY flaky|-
//        node ai_sdk_client.mjs stdio ONCERPC CONFIG KEY BY flaky|-
// (NODE_PATH: the node_modules holding the packages.)
import * as scenario from "./scenario.mjs";

const { createMCPClient } = await scenario.load("@ai-sdk/mcp");
const { Experimental_StdioMCPTransport } = await scenario.load("@ai-sdk/mcp/mcp-stdio");
const { asSchema } = await scenario.load("@ai-sdk/provider-utils");

const { mode, where, auth, key, by, flaky } = scenario.args();
const transport = mode === "stdio"
  ? new Experimental_StdioMCPTransport({ command: where, args: ["mcp", "--config", auth] })
  : { type: "http", url: where, headers: { Authorization: `Bearer ${auth}` } };

await scenario.within(120_000, (async () => {
  const client = await createMCPClient({ transport });
  try {
    const tools = await client.tools();
    const schemas = {};
    for (const [name, tool] of Object.entries(tools)) {
      schemas[name] = await asSchema(tool.inputSchema).jsonSchema;
    }
    let id = 0;
    const call = async (name, args) => {
      const tool = tools[name];
      const toolCallId = `call_${++id}`;
      const result = await tool.execute(args, { toolCallId, messages: [] });
      const forModel = await tool.toModelOutput({ toolCallId, input: args, output: result });
      return scenario.outcome(result.isError ?? false, scenario.textOf(forModel), result.structuredContent,
        result._meta ?? {});
    };
    const calls = await scenario.run(call, key, by, flaky);
    scenario.report("@ai-sdk/mcp", schemas, calls);
  } finally {
    await client.close();
  }
})());
