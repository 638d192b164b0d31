// The MCP inspector's CLI (npm `@modelcontextprotocol/inspector`, `--cli`) against oncerpc: one
// CLI run per request, as a person or a script runs it — `--method tools/list` (with `--strict`,
// its check that every tool schema is portable across model providers) and `--method tools/call`
// with `--tool-args-json` — each printing its JSON result (`--format json`), which carries
// `structuredContent` and `_meta`. Over stdio every run starts `oncerpc mcp` anew, so the test
// gives it a durable store; the demo counter `counter_get` reads lives in one process.
//
// Usage: node inspector_client.mjs http URL API_KEY KEY BY flaky|-
//        node inspector_client.mjs stdio ONCERPC CONFIG KEY BY flaky|-
// (NODE_PATH: the node_modules holding the inspector; HOME: where it may keep its files.)
import { spawnSync } from "node:child_process";
import path from "node:path";
import * as scenario from "./scenario.mjs";

const cli = path.join(process.env.NODE_PATH, "@modelcontextprotocol/inspector/clients/launcher/build/index.js");
const { mode, where, auth, key, by, flaky } = scenario.args();
const target = mode === "stdio"
  ? ["--", where, "mcp", "--config", auth]
  : ["--transport", "http", "--header", `Authorization: Bearer ${auth}`, "--", where];

/** One CLI run: its exit code, stderr, and stdout parsed as JSON (null when it is not). */
function inspector(args) {
  const run = spawnSync(process.execPath, [cli, "--cli", ...args, "--format", "json", ...target], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, MCP_CATALOG_PATH: path.join(process.env.HOME, "mcp.json") },
  });
  if (run.error) throw run.error;
  let json = null;
  try { json = JSON.parse(run.stdout); } catch { /* not JSON: kept as text below */ }
  return { code: run.status, stderr: run.stderr, stdout: run.stdout, json };
}

const listed = inspector(["--method", "tools/list", "--strict"]);
if (!listed.json) {
  console.error(`tools/list printed no JSON (exit ${listed.code}): ${listed.stdout}\n${listed.stderr}`);
  process.exit(1);
}
const tools = Object.fromEntries((listed.json.result?.tools ?? listed.json.tools ?? []).map((t) => [t.name, t.inputSchema]));

const call = async (name, args) => {
  const r = inspector(["--method", "tools/call", "--tool-name", name, "--tool-args-json", JSON.stringify(args)]);
  const result = r.json?.result ?? r.json;
  if (!result || !Array.isArray(result.content)) {
    return { ...scenario.outcome(true, `${r.stdout}\n${r.stderr}`), exit: r.code };
  }
  return { ...scenario.outcome(result.isError ?? false, scenario.textOf(result.content), result.structuredContent,
    result._meta ?? {}), exit: r.code };
};
const calls = await scenario.run(call, key, by, flaky);
scenario.report("@modelcontextprotocol/inspector", tools, calls,
  { strict: { exit: listed.code, stderr: listed.stderr } });
