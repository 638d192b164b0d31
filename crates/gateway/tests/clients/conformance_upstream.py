"""The MCP conformance suite's resources, resource template, prompts and completions, served by
an MCP server written with the official Python SDK (FastMCP), for oncerpc to re-export: the
fixtures of tests/mcp_conformance.rs put it behind oncerpc's door as an `[[mcp.upstreams]]`
(stdio), so the suite's resource and prompt scenarios read them through oncerpc.

Usage: conformance_upstream.py   (speaks MCP on stdin/stdout)
"""
import base64
import json

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.prompts.base import UserMessage
from mcp.types import Completion, EmbeddedResource, ImageContent, TextResourceContents

mcp = FastMCP("conformance-fixtures", log_level="WARNING")

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@mcp.resource("test://static-text", name="static-text", description="A static text resource.", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", name="static-binary", description="A static PNG image.", mime_type="image/png")
def static_binary() -> bytes:
    return PNG


@mcp.resource(
    "test://template/{id}/data",
    name="template-data",
    description="Data for an id.",
    mime_type="application/json",
)
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.prompt(name="test_simple_prompt", description="A simple prompt without arguments.")
def simple_prompt() -> str:
    return "This is a simple prompt for testing."


@mcp.prompt(name="test_prompt_with_arguments", description="A prompt with two arguments.")
def prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@mcp.prompt(name="test_prompt_with_embedded_resource", description="A prompt embedding a resource.")
def prompt_with_embedded_resource(resourceUri: str) -> list:
    resource = TextResourceContents(uri=resourceUri, mimeType="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(content=EmbeddedResource(type="resource", resource=resource)),
        UserMessage(content="Please process the embedded resource above."),
    ]


@mcp.prompt(name="test_prompt_with_image", description="A prompt with an image.")
def prompt_with_image() -> list:
    image = ImageContent(type="image", data=base64.b64encode(PNG).decode(), mimeType="image/png")
    return [UserMessage(content=image), UserMessage(content="Please analyze the image above.")]


@mcp.completion()
async def complete(ref, argument, context):
    options = ["paris", "park", "party", "test", "testing"]
    return Completion(values=[o for o in options if o.startswith(argument.value)], total=len(options), hasMore=False)


if __name__ == "__main__":
    mcp.run(transport="stdio")
