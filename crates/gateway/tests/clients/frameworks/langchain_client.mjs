// LangChain's MCP adapters for JS (npm `@langchain/mcp-adapters`) against oncerpc: a
// `MultiServerMCPClient` over HTTP or stdio, `getTools()` (LangChain tools), each schema as
// LangChain hands it to a model (`convertToOpenAITool`, what `bindTools` sends), and each tool
// run as an agent's tool node runs it (`tool.invoke` with the model's tool call: a
// `ToolMessage` whose artifacts carry the structured content and `_meta`; an `isError` result
// throws a `ToolException`, whose message a tool node hands the model). No model runs.
//
// Usage: node langchain_client.mjs http URL API_KEY KEY BY flaky|-
//        node langchain_client.mjs stdio ONCERPC CONFIG KEY BY flaky|-
import * as scenario from "./scenario.mjs";

const { MultiServerMCPClient } = await scenario.load("@langchain/mcp-adapters");
const { convertToOpenAITool } = await scenario.load("@langchain/core/utils/function_calling");

const { mode, where, auth, key, by, flaky } = scenario.args();
const server = mode === "stdio"
  ? { transport: "stdio", command: where, args: ["mcp", "--config", auth] }
  : { transport: "http", url: where, headers: { Authorization: `Bearer ${auth}` } };

await scenario.within(120_000, (async () => {
  const client = new MultiServerMCPClient({ mcpServers: { oncerpc: server }, defaultToolTimeout: 30_000 });
  try {
    const tools = Object.fromEntries((await client.getTools()).map((t) => [t.name, t]));
    const forModel = Object.fromEntries(Object.entries(tools).map(([n, t]) => [n, convertToOpenAITool(t).function]));
    let id = 0;
    const call = async (name, args) => {
      try {
        const msg = await tools[name].invoke({ name, args, id: `call_${++id}`, type: "tool_call" });
        const artifacts = msg.artifact ?? [];
        const of = (type) => artifacts.find((a) => a.type === type)?.data;
        return scenario.outcome(msg.status === "error", scenario.textOf(msg.content), of("mcp_structured_content"),
          of("mcp_meta") ?? {});
      } catch (e) {
        return scenario.outcome(true, String(e?.message ?? e));
      }
    };
    const calls = await scenario.run(call, key, by, flaky);
    scenario.report("@langchain/mcp-adapters", Object.fromEntries(
      Object.entries(forModel).map(([n, f]) => [n, f.parameters])), calls,
      { model_names: Object.values(forModel).map((f) => f.name).sort() });
  } finally {
    await client.close();
  }
})());
