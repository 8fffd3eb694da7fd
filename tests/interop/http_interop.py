#!/usr/bin/env python3
"""Interop check with the official MCP Python SDK (pinned in scripts/requirements.txt) over HTTP.

Drives a running `astra-mcp serve --http ...` through the SDK's streamable HTTP client (`http`, the /mcp
endpoint) or its legacy SSE client (`sse`, the /sse endpoint): initialize, tools/list, archival insert and
search (the inserted passage must come back first), search_codebase_memory, resources/list and
prompts/get core_memory. The SDK validates structuredContent against each tool's outputSchema. Prints one
JSON object with what it saw as the last stdout line; exits 1 on the first mismatch.

Usage: http_interop.py http http://127.0.0.1:PORT/mcp
       http_interop.py sse  http://127.0.0.1:PORT/sse
"""

import asyncio
import json
import logging
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

# A sentence no other test stores, so the search has one right answer even on a shared store (the same for
# both transports: a second insert of it is deduplicated to the first id).
PASSAGE = "Interop note from the Python SDK: the violet tram conductor counts stops in base seven."
QUERY = "violet tram conductor counts stops in base seven"


class Mismatch(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Mismatch(message)


def text_of(result):
    return "\n".join(b.text for b in result.content if b.type == "text")


async def exercise(session, mode):
    seen = {"transport": mode}
    init = await session.initialize()
    seen["server"] = init.server_info.name
    seen["protocol_version"] = init.protocol_version
    check(seen["server"] == "astra-mcp", f"server name is astra-mcp (got {seen['server']!r})")
    caps = init.capabilities
    check(caps.tools and caps.resources and caps.prompts, f"tools/resources/prompts capabilities (got {caps})")

    tools = (await session.list_tools()).tools
    seen["tools"] = [t.name for t in tools]
    for name in ("search_codebase_memory", "archival_memory_insert", "archival_memory_search"):
        check(name in seen["tools"], f"tools/list has {name}")
    for tool in tools:
        check(tool.input_schema.get("additionalProperties") is False, f"{tool.name}: strict input schema")
        check(tool.output_schema is not None, f"{tool.name}: output schema")

    inserted = await session.call_tool("archival_memory_insert", {"text": PASSAGE, "tags": ["interop"]})
    check(not inserted.is_error, f"archival_memory_insert succeeds: {text_of(inserted)}")
    hits = await session.call_tool("archival_memory_search", {
        "query": QUERY, "tags": None, "top_k": 3, "start": None, "end": None})
    check(not hits.is_error, f"archival_memory_search succeeds: {text_of(hits)}")
    results = hits.structured_content["results"]
    check(results and results[0]["id"] == inserted.structured_content["id"] and results[0]["text"] == PASSAGE,
          f"the inserted passage is result 1 (got {results[:1]})")
    seen["archival_first_line"] = text_of(hits).splitlines()[0]
    check(seen["archival_first_line"].startswith("Result 1 (fused_score="), f"result text: {seen['archival_first_line']}")

    fixes = await session.call_tool("search_codebase_memory",
                                    {"query": "second allowed origin rejected", "error_type": None, "top_k": 3})
    check(not fixes.is_error and isinstance(fixes.structured_content.get("matches"), list),
          f"search_codebase_memory succeeds: {text_of(fixes)}")
    seen["fix_search_first_line"] = text_of(fixes).splitlines()[0]

    seen["resources"] = [str(r.uri) for r in (await session.list_resources()).resources]
    for section in ("persona", "human", "project"):
        check(f"memory://core/{section}" in seen["resources"], f"resources/list has memory://core/{section}")
    prompt = await session.get_prompt("core_memory")
    check("<project" in prompt.messages[0].content.text, "prompts/get core_memory renders the project block")
    seen["prompt_messages"] = len(prompt.messages)
    return seen


class Collect(logging.Handler):
    """Keeps the SDK's own warnings (e.g. an unexpected status on the closing DELETE) for the summary."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


async def main(mode, url):
    warnings = Collect()
    logging.getLogger("mcp").addHandler(warnings)
    client = {"http": streamable_http_client, "sse": sse_client}[mode]
    async with client(url) as (read, write):
        async with ClientSession(read, write) as session:
            # A hung server must not hang CI.
            seen = await asyncio.wait_for(exercise(session, mode), timeout=120)
    # Leaving the streamable HTTP client sends DELETE /mcp; the SDK logs a warning unless the answer is
    # 200, 204 or 405. Reported, not failed on: the caller decides.
    print(json.dumps({"ok": True, **seen, "sdk_warnings": warnings.messages}))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("http", "sse"):
        sys.exit("usage: http_interop.py http URL_OF_/mcp | sse URL_OF_/sse")
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except Exception as error:  # a mismatch, connection refused, a JSON-RPC error, a timeout
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]  # anyio wraps the real cause in task-group exception groups
        message = str(error) if isinstance(error, Mismatch) else f"{type(error).__name__}: {error}"
        print(json.dumps({"ok": False, "failed": message}))
        sys.exit(1)
