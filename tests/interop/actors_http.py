#!/usr/bin/env python3
"""Actor isolation and per-session gates over streamable HTTP, with the official MCP Python SDK.

The server runs with two bearer tokens (alice, bob). Alice fills every kind of memory through the tools;
then, for every tool, bob's calls must neither see nor change any of it. Two sessions of the same token
must not satisfy each other's gates either. Prints one JSON object with what it saw; exits 1 on the first
mismatch.

Usage: actors_http.py URL ALICE_TOKEN BOB_TOKEN WORKSPACE
(the workspace's tests pass once `app.txt` says `fixed`; the script makes that edit itself)
"""

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

SECRET = "Alice's deploy key for the staging cluster rotates every Friday at noon"
FIX_QUERY = "test_app_is_fixed AssertionError app.txt says broken"


def check(condition, message):
    if not condition:
        print(json.dumps({"ok": False, "failed": message}), flush=True)
        os._exit(1)  # not sys.exit: inside the SDK's task groups it would be wrapped in exception groups


def text_of(result):
    return "\n".join(b.text for b in result.content if b.type == "text")


@contextlib.asynccontextmanager
async def session_for(url, token):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def main(url, alice_token, bob_token, workspace):
    seen = {}
    async with session_for(url, alice_token) as alice, session_for(url, bob_token) as bob, \
            session_for(url, alice_token) as alice2:
        # --- alice fills every tier -------------------------------------------------------------
        await alice.call_tool("search_codebase_memory", {"query": FIX_QUERY, "error_type": None, "top_k": 3})
        failed = await alice.call_tool("run_tests", {})
        check(failed.structured_content["passed"] is False, "alice: tests fail before the edit")
        Path(workspace, "app.txt").write_text("fixed\n")
        passed = await alice.call_tool("run_tests", {})
        outcome = passed.structured_content["confirmed_outcome"]
        check(passed.structured_content["passed"] and outcome, "alice: tests pass after the edit")
        stored = await alice.call_tool("store_fix_memory", {
            "fix_description": "write fixed into app.txt so test_app_is_fixed passes",
            "error_type": "AssertionError", "file_paths": ["app.txt"], "outcome": outcome})
        check(not stored.is_error, f"alice stores her fix: {text_of(stored)}")
        fix_id = stored.structured_content["memory_id"]
        inserted = await alice.call_tool("archival_memory_insert", {"text": SECRET, "tags": ["ops"]})
        check(not inserted.is_error, "alice inserts a passage")
        passage_id = inserted.structured_content["id"]
        appended = await alice.call_tool("core_memory_append", {"section": "human", "text": "Alice prefers tabs."})
        check(appended.structured_content["version"] == 1, "alice's first core append is version 1")
        # her own searches find all of it (so bob's empty results below mean something)
        own = await alice.call_tool("search_codebase_memory", {"query": FIX_QUERY, "error_type": None, "top_k": 3})
        check([m["memory_id"] for m in own.structured_content["matches"]][:1] == [fix_id], "alice finds her fix")
        own = await alice.call_tool("archival_memory_search", {"query": "deploy key rotation", "tags": None,
                                                                "top_k": 3, "start": None, "end": None})
        check(own.structured_content["results"][0]["id"] == passage_id, "alice finds her passage")
        recorded = None
        for _ in range(50):  # tool calls are recorded in the background
            recorded = await alice.call_tool("conversation_search", {"query": "tool call store_fix_memory",
                                                                     "top_k": 5, "start": None, "end": None})
            if recorded.structured_content["results"]:
                break
            await asyncio.sleep(0.1)
        check(recorded.structured_content["results"], "alice finds her recorded tool calls")
        seen["alice_recorded_calls"] = len(recorded.structured_content["results"])

        # --- the same token, another session: gates are per session ------------------------------
        await alice2.call_tool("search_codebase_memory", {"query": "anything", "error_type": None, "top_k": 1})
        borrowed = await alice2.call_tool("store_fix_memory", {
            "fix_description": "reuse the other session's passing run", "error_type": "AssertionError",
            "file_paths": ["app.txt"], "outcome": outcome})
        check(borrowed.is_error, "a second session cannot store with the first session's confirmed outcome")
        seen["other_session_store"] = text_of(borrowed).splitlines()[0]

        # --- bob, tool by tool ------------------------------------------------------------------
        found = await bob.call_tool("search_codebase_memory", {"query": FIX_QUERY, "error_type": None, "top_k": 10})
        check(fix_id not in [m["memory_id"] for m in found.structured_content["matches"]],
              "search_codebase_memory: bob does not see alice's fix")
        stolen = await bob.call_tool("store_fix_memory", {
            "fix_description": "reuse alice's passing run", "error_type": "AssertionError",
            "file_paths": ["app.txt"], "outcome": outcome})
        check(stolen.is_error, "store_fix_memory: bob cannot use alice's confirmed outcome")
        bob_run = await bob.call_tool("run_tests", {})
        check(bob_run.structured_content["passed"], "run_tests: bob runs the server's workspace tests himself")
        hits = await bob.call_tool("archival_memory_search", {"query": "deploy key rotation", "tags": None,
                                                              "top_k": 10, "start": None, "end": None})
        check(passage_id not in [r["id"] for r in hits.structured_content["results"]],
              "archival_memory_search: bob does not see alice's passage")
        mine = await bob.call_tool("archival_memory_insert", {"text": SECRET, "tags": []})
        check(mine.structured_content["deduplicated"] is False and mine.structured_content["id"] != passage_id,
              "archival_memory_insert: bob's copy is his own row, not a duplicate of alice's")
        calls = await bob.call_tool("conversation_search", {"query": "tool call store_fix_memory", "top_k": 10,
                                                            "start": None, "end": None})
        alice_items = {r["id"] for r in recorded.structured_content["results"]}
        check(not alice_items & {r["id"] for r in calls.structured_content["results"]},
              "conversation_search: bob does not see alice's session items")
        replaced = await bob.call_tool("core_memory_replace", {"section": "human", "old_text": "Alice prefers tabs.",
                                                               "new_text": "Alice prefers spaces."})
        check(replaced.is_error, "core_memory_replace: bob cannot edit alice's block")
        bob_block = await bob.call_tool("core_memory_append", {"section": "human", "text": "Bob uses vim."})
        check(bob_block.structured_content["version"] == 1, "core_memory_append: bob's block is his own")
        read = await bob.read_resource("memory://core/human")
        check(read.contents[0].text == "Bob uses vim.", "resources/read: bob reads only his block")
        prompt = await bob.get_prompt("core_memory")
        check("Alice" not in prompt.messages[0].content.text, "prompts/get: bob's prompt has nothing of alice's")
        forgot = await bob.call_tool("memory_forget", {"id": passage_id})
        check(forgot.is_error, "memory_forget: bob cannot delete alice's passage")
        forgot = await bob.call_tool("memory_forget", {"id": fix_id})
        check(forgot.is_error, "memory_forget: bob cannot delete alice's fix")

        # --- alice's memory is intact ------------------------------------------------------------
        again = await alice.call_tool("archival_memory_search", {"query": "deploy key rotation", "tags": None,
                                                                  "top_k": 3, "start": None, "end": None})
        check(again.structured_content["results"][0]["id"] == passage_id, "alice's passage survived bob")
        block = await alice.read_resource("memory://core/human")
        check(block.contents[0].text == "Alice prefers tabs.", "alice's block survived bob")
        seen["bob_forget_error"] = text_of(forgot).splitlines()[0]
    print(json.dumps({"ok": True, **seen}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
