"""The official MCP Python SDK as an MCP host that signs in with OAuth: it starts with no token,
gets oncerpc's 401, follows the protected resource metadata (RFC 9728) to the authorization
server, gets a token by the client-credentials grant (ClientCredentialsOAuthProvider) and calls a
tool twice with one key.

Usage: mcp_oauth_client.py URL CLIENT_ID CLIENT_SECRET SCOPE KEY
Prints one JSON object with what it saw.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamablehttp_client


class Memory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


async def main(url, client_id, secret, scope, key):
    storage = Memory()
    auth = ClientCredentialsOAuthProvider(url, storage, client_id, secret, scopes=scope)
    async with streamablehttp_client(url, auth=auth) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            args = {"sku": "P-1", "idempotency_key": key}
            first = await session.call_tool("orders_create", args)
            again = await session.call_tool("orders_create", args)
    status = lambda r: (r.meta or {}).get("io.oncerpc/idempotency-status")
    print(json.dumps({
        "tools": tools,
        "first": {"status": status(first), "is_error": first.isError},
        "again": {"status": status(again), "is_error": again.isError},
        "had_token": storage.tokens is not None,
    }))


asyncio.run(main(*sys.argv[1:6]))
