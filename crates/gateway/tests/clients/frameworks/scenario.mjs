// The scenario every TypeScript framework client runs against oncerpc, through the framework's
// own tool objects (what it hands a model), and the one JSON summary it prints (as scenario.py:
// the Rust test reads both alike).
//
// A client gives `run` a `call(name, arguments)` that calls a tool the way the framework does
// for a model and returns `outcome(...)` of what it gave back. The scenario: read
// `counter_get`, call `counter_increment` with `by` and a key twice (a retry), read
// `counter_get` again; with `flaky`, call `demo_flaky` (fails its first run) twice with one key,
// then once more with `force_retry: true`.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.NODE_PATH;
const require = createRequire(path.join(modules, "noop.js"));

/** Import the npm package (or subpath) `spec` from NODE_PATH. */
export async function load(spec) {
  return import(pathToFileURL(require.resolve(spec)).href);
}

/** The installed version of the npm package `name`. */
export function version(name) {
  return JSON.parse(fs.readFileSync(path.join(modules, name, "package.json"), "utf8")).version;
}

/** One call as the framework returned it; `meta` undefined where it exposes no `_meta`. */
export function outcome(isError, text, structured = null, meta = undefined) {
  return {
    is_error: isError ?? null,
    text: text ?? null,
    structured: structured ?? null,
    status: meta === undefined ? null : (meta?.["io.oncerpc/idempotency-status"] ?? null),
    meta_seen: meta !== undefined,
  };
}

/** The text of a framework's content: a string, a list of blocks, or one block. */
export function textOf(content) {
  if (content == null) return null;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map(textOf).filter(Boolean).join("");
  if (typeof content.text === "string") return content.text;
  if (content.value !== undefined) return textOf(content.value);
  return JSON.stringify(content);
}

export async function run(call, key, by, flaky) {
  const seen = {};
  seen.before = await call("counter_get", {});
  seen.first = await call("counter_increment", { by, idempotency_key: key });
  seen.again = await call("counter_increment", { by, idempotency_key: key });
  seen.after = await call("counter_get", {});
  if (flaky) {
    const args = { fail_times: 1, idempotency_key: `${key}-flaky` };
    seen.flaky = {
      first: await call("demo_flaky", args),
      again: await call("demo_flaky", args),
      forced: await call("demo_flaky", { ...args, force_retry: true }),
    };
  }
  return seen;
}

/** Print the summary: the framework and its version, every tool name and schema as the
 * framework hands them to a model (`tools`: name → schema), the calls, and `extra`. */
export function report(framework, tools, calls, extra = {}) {
  console.log(JSON.stringify({
    framework,
    version: version(framework),
    names: Object.keys(tools).sort(),
    increment_schema: tools.counter_increment ?? null,
    flaky_schema: tools.demo_flaky ?? null,
    ...calls,
    ...extra,
  }));
}

/** MODE WHERE AUTH KEY BY FLAKY: `http URL API_KEY …` or `stdio ONCERPC CONFIG …`. */
export function args() {
  const [mode, where, auth, key, by, flaky] = process.argv.slice(2);
  return { mode, where, auth, key, by: Number(by), flaky: flaky === "flaky" };
}

/** Fail (exit 1) rather than hang when `promise` takes longer than `ms`. */
export function within(ms, promise) {
  const timer = setTimeout(() => {
    console.error(`timed out after ${ms} ms`);
    process.exit(1);
  }, ms);
  return promise.finally(() => clearTimeout(timer));
}
