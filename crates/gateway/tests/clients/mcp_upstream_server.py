"""An MCP server written with the official Python SDK (package `mcp`, its FastMCP server
classes), standing for someone else's server that oncerpc is put in front of.

Usage: mcp_upstream_server.py LOG stdio
       mcp_upstream_server.py LOG http PORT
Every execution of a tool appends one JSON line to LOG: the tool, its arguments and the
`_meta["io.oncerpc/idempotency-key"]` it was called with, so the Rust tests count what
really ran. At start it appends {"started": PID}.

Tools: `charge` (a command: counts), `slow_charge` (a command that logs its start, then
waits while the file LOG.hold exists, at most 60 s, so that a test can kill a process while
it is in flight; cancelled by its client, it logs `slow_charge_cancelled`), `declined` (a command whose result is an isError one), `balance`
(readOnlyHint: a query), `keyed_charge` (a command that honours the key in `_meta`, as payment
APIs do: a key it has seen gets that call's result again), `flood` (reports progress `count`
times with `size`-byte messages, `pause_ms` apart), `unlock_refund` (adds a `refund` tool and sends
notifications/tools/list_changed), `ship` (reports progress three times when the call has a
progress token; its `region` argument is marked `x-mcp-header: Region`), `publish_statement` (adds
the resource `pay://statement` and sends notifications/resources/list_changed). The commands
take an optional `idempotency_key` argument of their own, as some servers do (oncerpc's
`key_argument`).

Besides tools: the resource `pay://terms` (text), the resource template
`pay://receipts/{receipt_id}` (JSON; the receipt `missing` does not exist), and the prompt
`dispute` (arguments `charge_id`, and `reason`, whose values are completed, as are a
receipt's ids). Each read or get is logged as {"read": URI} or {"prompt": NAME, ...}.

With UPSTREAM_ISSUER and UPSTREAM_AUDIENCE set (http only), it is an OAuth resource server:
every request must carry `Authorization: Bearer` with a JWT signed by a key of the issuer's
JWKS (fetched from ISSUER/jwks, as oidc-provider serves it) for that audience, else `401`. Each
request is logged as {"bearer": first 16 hex of the token's SHA-256, "accepted", "client_id"}.
While the file LOG.refuse exists, the next token presented is refused from then on (and the
file removed): a token the upstream revoked.
"""
import asyncio
import hashlib
import json
import os
import sys
from typing import Annotated

from pydantic import Field
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.resources import TextResource
from mcp.types import (
    CallToolResult,
    Completion,
    PromptReference,
    ResourceTemplateReference,
    TextContent,
    ToolAnnotations,
)

LOG = sys.argv[1]
mcp = FastMCP("python-upstream", log_level="WARNING")


def record(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def seen_key(ctx: Context):
    meta = ctx.request_context.meta
    if meta is None:
        return None
    return meta.model_dump().get("io.oncerpc/idempotency-key")


def executions(tool):
    with open(LOG) as f:
        return sum(1 for line in f if json.loads(line).get("tool") == tool)


@mcp.tool(description="Charge a card (counts every execution).")
def charge(amount: int, card: str, ctx: Context, idempotency_key: str | None = None) -> dict:
    record({"tool": "charge", "amount": amount, "card": card, "key": seen_key(ctx),
            "key_argument": idempotency_key})
    return {"charged": amount, "card": card, "executions": executions("charge")}


@mcp.tool(description="Charge slowly: logs its start, then waits while LOG.hold exists.")
async def slow_charge(amount: int, ctx: Context, idempotency_key: str | None = None) -> dict:
    record({"tool": "slow_charge", "amount": amount, "key": seen_key(ctx), "key_argument": idempotency_key})
    try:
        for _ in range(600):
            if not os.path.exists(LOG + ".hold"):
                break
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        # The client sent notifications/cancelled for this call.
        record({"tool": "slow_charge_cancelled", "key": seen_key(ctx)})
        raise
    return {"charged": amount}


@mcp.tool(description="A card that is always declined.")
def declined(amount: int, ctx: Context, idempotency_key: str | None = None) -> CallToolResult:
    record({"tool": "declined", "amount": amount, "key": seen_key(ctx)})
    return CallToolResult(content=[TextContent(type="text", text="card declined")], isError=True)


def refund(amount: int) -> dict:
    record({"tool": "refund", "amount": amount})
    return {"refunded": amount}


@mcp.tool(description="Offer the refund tool too, and say so (notifications/tools/list_changed).")
async def unlock_refund(ctx: Context) -> dict:
    record({"tool": "unlock_refund", "key": seen_key(ctx)})
    mcp.add_tool(refund, name="refund", description="Refund a charge.")
    await ctx.session.send_tool_list_changed()
    return {"unlocked": True}


@mcp.tool(description="Ship an order in three stages, reporting progress after each.")
async def ship(
    order: str,
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ctx: Context,
    idempotency_key: str | None = None,
) -> dict:
    meta = ctx.request_context.meta
    token = meta.progressToken if meta is not None else None
    record({"tool": "ship", "order": order, "region": region, "key": seen_key(ctx), "progress_token": token})
    # Work between reports, as a real server's stages take time: this SDK sends the
    # notifications on the session's other stream, which the answer could overtake otherwise.
    for i, stage in enumerate(["packed", "labelled", "handed over"], start=1):
        await asyncio.sleep(0.1)
        await ctx.report_progress(i, 3, stage)
    await asyncio.sleep(0.1)
    return {"shipped": order, "region": region}


# What keyed_charge answered, by the idempotency key it was called with.
ANSWERED = {}


@mcp.tool(description="Charge once per idempotency key, as a payments API does: a key seen before gets its first call's result.")
def keyed_charge(amount: int, account: str, ctx: Context, idempotency_key: str | None = None) -> dict:
    key = seen_key(ctx)
    if key is not None and key in ANSWERED:
        return ANSWERED[key]
    record({"tool": "keyed_charge", "amount": amount, "account": account, "key": key})
    result = {"args": {"account": account, "amount": amount}, "charged": True}
    if key is not None:
        ANSWERED[key] = result
    return result


@mcp.tool(description="Report progress `count` times, each with a message of `size` bytes, `pause_ms` apart.")
async def flood(count: int, size: int, pause_ms: int, ctx: Context, idempotency_key: str | None = None) -> dict:
    record({"tool": "flood", "count": count, "size": size, "key": seen_key(ctx)})
    message = "x" * size
    for i in range(count):
        await ctx.report_progress(i + 1, count, message)
        if pause_ms:
            await asyncio.sleep(pause_ms / 1000)
    record({"tool": "flood_done", "key": seen_key(ctx)})
    return {"flooded": count}


@mcp.tool(description="The balance (read-only).", annotations=ToolAnnotations(readOnlyHint=True))
def balance(ctx: Context) -> dict:
    record({"tool": "balance", "key": seen_key(ctx)})
    return {"balance": 100}


@mcp.resource("pay://terms", name="terms", description="The payment terms.", mime_type="text/plain")
def terms() -> str:
    record({"read": "pay://terms"})
    return "Payment is due within 30 days."


@mcp.resource(
    "pay://receipts/{receipt_id}",
    name="receipt",
    description="A receipt, by its id.",
    mime_type="application/json",
)
def receipt(receipt_id: str) -> str:
    record({"read": f"pay://receipts/{receipt_id}"})
    if receipt_id == "missing":
        raise ValueError(f"no receipt {receipt_id}")
    return json.dumps({"receipt": receipt_id, "amount": 5})


@mcp.prompt(name="dispute", description="Draft a dispute of a charge.")
def dispute(charge_id: str, reason: str = "duplicate") -> str:
    record({"prompt": "dispute", "charge_id": charge_id, "reason": reason})
    return f"Write a dispute of charge {charge_id}, reason: {reason}."


@mcp.completion()
async def complete(ref, argument, context):
    if isinstance(ref, PromptReference) and ref.name == "dispute" and argument.name == "reason":
        options = ["duplicate", "fraudulent", "not received"]
    elif isinstance(ref, ResourceTemplateReference) and argument.name == "receipt_id":
        options = ["r-1", "r-2", "r-10"]
    else:
        return None
    return Completion(values=[o for o in options if o.startswith(argument.value)], hasMore=False)


@mcp.tool(description="Publish the monthly statement as a resource (notifications/resources/list_changed).")
async def publish_statement(ctx: Context) -> dict:
    record({"tool": "publish_statement", "key": seen_key(ctx)})
    mcp.add_resource(TextResource(uri="pay://statement", name="statement", text="Nothing due.", mime_type="text/plain"))
    await ctx.session.send_resource_list_changed()
    return {"published": "pay://statement"}


class BearerCheck:
    """An ASGI layer in front of the SDK's app: the resource-server checks described above."""

    def __init__(self, app, issuer, audience):
        import jwt

        self.app, self.issuer, self.audience = app, issuer, audience
        self.jwks = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True)
        self.refused = set()

    def claims(self, token):
        import jwt

        try:
            key = self.jwks.get_signing_key_from_jwt(token)
            return jwt.decode(token, key.key, algorithms=["ES256", "RS256", "EdDSA"],
                              audience=self.audience, issuer=self.issuer)
        except Exception:
            return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        if token and os.path.exists(LOG + ".refuse"):
            os.remove(LOG + ".refuse")
            self.refused.add(token)
        claims = None
        if token and token not in self.refused:
            claims = await asyncio.to_thread(self.claims, token)
        record({"bearer": hashlib.sha256(token.encode()).hexdigest()[:16] if token else None,
                "accepted": claims is not None, "client_id": (claims or {}).get("client_id"),
                "http_method": scope["method"]})
        if claims is None:
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer error="invalid_token"')]})
            await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
            return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    record({"started": os.getpid()})
    if sys.argv[2] == "stdio":
        mcp.run(transport="stdio")
    elif os.environ.get("UPSTREAM_ISSUER"):
        import uvicorn

        app = BearerCheck(mcp.streamable_http_app(), os.environ["UPSTREAM_ISSUER"],
                          os.environ["UPSTREAM_AUDIENCE"])
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
    else:
        mcp.settings.host = "127.0.0.1"
        mcp.settings.port = int(sys.argv[3])
        mcp.run(transport="streamable-http")
