#!/usr/bin/env python3
"""Interop check with the official MCP Python SDK (pinned in scripts/requirements.txt) over stdio.

Drives `astra-mcp serve --stdio` through the SDK's own client: initialize, tools/list, a schema violation
(must be a tool result with isError, not a JSON-RPC error), the memory gate, and the full verified loop on a
scenario copy. The SDK validates structuredContent against each tool's outputSchema. Prints one JSON object
with what it saw; exits 1 on the first mismatch.

Usage: stdio_interop.py BINARY DB WORKSPACE FIX_SOURCE TEST_COMMAND
"""

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def check(condition, message):
    if not condition:
        print(json.dumps({"ok": False, "failed": message}))
        sys.exit(1)


def text_of(result):
    return "\n".join(b.text for b in result.content if b.type == "text")


async def main(binary, db, workspace, fix_source, test_command):
    params = StdioServerParameters(
        command=binary,
        args=["serve", "--stdio", "--db", db, "--workspace", workspace, "--test-command", test_command,
              "--actor", "interop"],
        env={**{k: v for k, v in os.environ.items() if k.startswith(("ASTRA_", "ORT_", "XDG_"))}, "ASTRA_LOG": "warn"},
    )
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            seen["protocol_version"] = init.protocol_version
            check(init.instructions and "run_tests" in init.instructions, "instructions mention run_tests")
            tools = (await session.list_tools()).tools
            seen["tools"] = [t.name for t in tools]
            for tool in tools:
                check(tool.input_schema.get("additionalProperties") is False, f"{tool.name}: strict input schema")
                check(tool.output_schema is not None, f"{tool.name}: output schema")

            bad = await session.call_tool("search_codebase_memory", {"query": "x", "error_type": None, "top_k": 0})
            check(bad.is_error and "between 1 and 10" in text_of(bad), "schema violation is an isError result")

            early = await session.call_tool("store_fix_memory", {
                "fix_description": "x", "error_type": "E", "file_paths": ["webapp/settings.py"], "outcome": "o"})
            check(early.is_error and "search_codebase_memory" in text_of(early), "memory gate refuses an early store")

            empty = await session.call_tool("search_codebase_memory",
                                            {"query": "second allowed origin rejected", "error_type": None, "top_k": 3})
            check(text_of(empty) == "No relevant confirmed fixes found.", "empty store, exact empty text")

            failed = await session.call_tool("run_tests", {})
            check(not failed.is_error and failed.structured_content["passed"] is False, "tests fail before the fix")
            seen["failing_tests"] = len(failed.structured_content["failing_tests"])

            for path in Path(fix_source).rglob("*"):
                if path.is_file():
                    shutil.copyfile(path, Path(workspace) / path.relative_to(fix_source))
            passed = await session.call_tool("run_tests", {})
            outcome = passed.structured_content["confirmed_outcome"]
            check(passed.structured_content["passed"] and outcome, "tests pass after the fix")
            seen["confirmed_outcome"] = outcome

            stored = await session.call_tool("store_fix_memory", {
                "fix_description": "strip whitespace around comma-separated origins", "error_type": "AssertionError",
                "file_paths": ["webapp/settings.py"], "outcome": outcome})
            check(not stored.is_error, f"store succeeds: {text_of(stored)}")
            seen["memory_id"] = stored.structured_content["memory_id"]

            found = await session.call_tool("search_codebase_memory",
                                            {"query": "origins keep leading whitespace", "error_type": "assertionerror",
                                             "top_k": 1})
            check(found.structured_content["matches"][0]["memory_id"] == seen["memory_id"], "the fix is found")
            seen["match_text_first_line"] = text_of(found).splitlines()[0]

            # tiered memory through the same client: core block as a resource and a prompt, archival memory
            resources = (await session.list_resources()).resources
            seen["resources"] = [str(r.uri) for r in resources]
            appended = await session.call_tool("core_memory_append",
                                               {"section": "project", "text": "Tests run with pytest -q."})
            check(not appended.is_error and appended.structured_content["version"] == 1, "core append")
            read = await session.read_resource("memory://core/project")
            check(read.contents[0].text == "Tests run with pytest -q.", "the block reads back as a resource")
            prompt = await session.get_prompt("core_memory")
            check("Tests run with pytest -q." in prompt.messages[0].content.text, "the prompt renders the block")
            inserted = await session.call_tool("archival_memory_insert",
                                               {"text": "Settings parse ALLOWED_ORIGINS with str.split.", "tags": ["webapp"]})
            again = await session.call_tool("archival_memory_insert",
                                            {"text": "settings parse  allowed_origins with str.split.", "tags": []})
            check(again.structured_content["deduplicated"] is True
                  and again.structured_content["id"] == inserted.structured_content["id"], "dedupe")
            hits = await session.call_tool("archival_memory_search", {
                "query": "ALLOWED_ORIGINS", "tags": ["webapp"], "top_k": 3, "start": None, "end": None})
            check(hits.structured_content["results"][0]["id"] == inserted.structured_content["id"], "archival search")
            seen["archival_first_line"] = text_of(hits).splitlines()[0]
    print(json.dumps({"ok": True, **seen}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
