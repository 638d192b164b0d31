"""The scenario every Python framework client runs against oncerpc, through the framework's own
tool objects (what it hands a model), and the one JSON summary it prints.

A client script gives `run` a `call(name, arguments)` coroutine that calls a tool the way the
framework does for a model and returns `outcome(...)` of what the framework gave back. The
scenario: read `counter_get`, call `counter_increment` with `by` and a key twice (a retry),
read `counter_get` again; with `flaky`, call `demo_flaky` (fails its first run) twice with one
key, then once more with `force_retry: true`.
"""
import json
import sys
from importlib.metadata import version


def outcome(is_error, text, structured=None, meta=None):
    """One call as the framework returned it; `meta` is None where it exposes no `_meta`."""
    return {
        "is_error": is_error,
        "text": text,
        "structured": structured,
        "status": (meta or {}).get("io.oncerpc/idempotency-status") if meta is not None else None,
        "meta_seen": meta is not None,
    }


def text_of(content):
    """The text of a framework's content: a string, a list of blocks or dicts, or one block."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text") if "text" in content else json.dumps(content)
    if isinstance(content, (list, tuple)):
        return "".join(t for t in (text_of(c) for c in content) if t)
    return getattr(content, "text", None) or str(content)


async def run(call, key, by, flaky):
    seen = {}
    seen["before"] = await call("counter_get", {})
    seen["first"] = await call("counter_increment", {"by": by, "idempotency_key": key})
    seen["again"] = await call("counter_increment", {"by": by, "idempotency_key": key})
    seen["after"] = await call("counter_get", {})
    if flaky:
        args = {"fail_times": 1, "idempotency_key": key + "-flaky"}
        seen["flaky"] = {
            "first": await call("demo_flaky", args),
            "again": await call("demo_flaky", args),
            "forced": await call("demo_flaky", {**args, "force_retry": True}),
        }
    return seen


def report(package, tools, calls, **extra):
    """Print the summary: the framework and its version, every tool name and schema as the
    framework hands them to a model, the calls, and anything framework-specific."""
    print(json.dumps({
        "framework": package,
        "version": version(package),
        "names": sorted(tools),
        "increment_schema": tools.get("counter_increment"),
        "flaky_schema": tools.get("demo_flaky"),
        **calls,
        **extra,
    }))


def args():
    """MODE WHERE AUTH KEY BY FLAKY: `http URL API_KEY …` or `stdio ONCERPC CONFIG …`."""
    mode, where, auth, key, by, flaky = sys.argv[1:7]
    return mode, where, auth, key, int(by), flaky == "flaky"
