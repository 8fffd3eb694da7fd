#!/usr/bin/env python3
"""The main job of astra-mcp, end to end, through a real MCP client (the official Python SDK, pinned).

Two separate MCP sessions, each against its own `astra-mcp serve --stdio` process, one shared store:

  Session A (scenario_alpha): search memory (nothing yet) -> run_tests (fail) -> apply the reference fix
  (standing in for the agent's edit) -> run_tests (pass) -> store_fix_memory with the confirmed outcome.
  Session B (scenario_beta, a different app whose failure looks alike): run_tests (fail) -> search with the
  failure symptoms it saw -> A's fix must come back as Match 1, before any edit -> apply beta's reference
  fix -> run_tests (pass) -> store.

Prints each step; exits 1 at the first step whose result differs from the expectation.
Usage: demo.py --binary PATH [--keep]
"""

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "scripts" / "reference_fixes"
PYTHON = sys.executable  # the tooling venv's python, which has pytest
TEST_COMMAND = f"{PYTHON} -m pytest -q -p no:cacheprovider"


class StepFailed(Exception):
    pass


def step(title):
    print(f"\n== {title}", flush=True)


def expect(condition, message):
    if not condition:
        raise StepFailed(message)
    print(f"   ok: {message}", flush=True)


def text_of(result):
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def show(result):
    for line in text_of(result).splitlines():
        print(f"   | {line}")


def server(binary, db, workspace):
    env = {k: v for k, v in os.environ.items() if k.startswith(("ASTRA_", "ORT_", "XDG_"))}
    env["ASTRA_LOG"] = env.get("ASTRA_LOG", "warn")
    return StdioServerParameters(
        command=str(binary),
        args=["serve", "--stdio", "--db", str(db), "--workspace", str(workspace),
              "--test-command", TEST_COMMAND, "--actor", "demo-user"],
        env=env,
    )


def apply_reference_fix(scenario, workspace):
    source = REFERENCE / scenario
    changed = []
    for path in source.rglob("*"):
        if path.is_file():
            rel = path.relative_to(source)
            shutil.copyfile(path, workspace / rel)
            changed.append(str(rel))
    return changed


async def session_a(binary, db, workspace):
    async with stdio_client(server(binary, db, workspace)) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            step(f"A1 initialize: {init.server_info.name} {init.server_info.version}")
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            expect({"search_codebase_memory", "run_tests", "store_fix_memory"} <= set(tools), f"tools/list offers {tools}")

            step("A2 search_codebase_memory before editing")
            query = ("second allowed origin is rejected by the CORS check; origins parsed from the comma-separated "
                     "ALLOWED_ORIGINS env value keep a leading space")
            result = await session.call_tool("search_codebase_memory", {"query": query, "error_type": None, "top_k": 3})
            show(result)
            expect(not result.is_error and text_of(result) == "No relevant confirmed fixes found.",
                   "an empty store has nothing to offer")

            step("A3 run_tests on the shipped code")
            result = await session.call_tool("run_tests", {})
            show(result)
            out = result.structured_content
            expect(not result.is_error and out["passed"] is False and len(out["failing_tests"]) == 4,
                   "the four acceptance tests fail")

            step("A4 apply the reference fix (this stands in for the agent's edit)")
            changed = apply_reference_fix("scenario_alpha", workspace)
            print(f"   edited: {', '.join(changed)}")

            step("A5 run_tests after the edit")
            result = await session.call_tool("run_tests", {})
            show(result)
            out = result.structured_content
            expect(out["passed"] is True and out["confirmed_outcome"], "tests pass and the server issues a confirmed_outcome")
            outcome = out["confirmed_outcome"]

            step("A6 store_fix_memory with the confirmed outcome")
            result = await session.call_tool("store_fix_memory", {
                "fix_description": ("Comma-separated settings read from an environment variable kept the whitespace "
                                    "after each comma (' https://admin.example.com'), so every entry after the first "
                                    "failed exact comparison. Fix: split on ',', strip() each entry and drop blank "
                                    "entries before using the list."),
                "error_type": "AssertionError",
                "file_paths": changed,
                "outcome": outcome,
            })
            show(result)
            stored = result.structured_content
            expect(not result.is_error and stored["verified"] is True and stored["created"] is True,
                   f"fix stored as verified memory {stored['memory_id']}")
            return stored["memory_id"]


async def session_b(binary, db, workspace, alpha_memory_id):
    async with stdio_client(server(binary, db, workspace)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            step("B1 run_tests on scenario_beta as shipped (a new session, a new server process)")
            result = await session.call_tool("run_tests", {})
            show(result)
            out = result.structured_content
            expect(out["passed"] is False and out["failing_tests"], "beta's tests fail")

            step("B2 search_codebase_memory with beta's failure symptoms, before any edit")
            symptoms = "; ".join(t["message"] or t["name"] for t in out["failing_tests"])
            result = await session.call_tool("search_codebase_memory",
                                             {"query": symptoms[:2000], "error_type": None, "top_k": 3})
            show(result)
            matches = result.structured_content["matches"]
            expect(matches and text_of(result).startswith("Match 1 (fused_score="), "the search returns matches")
            expect(matches[0]["memory_id"] == alpha_memory_id,
                   f"Match 1 is session A's fix from project {matches[0]['project']} (score {matches[0]['score']})")
            expect(matches[0]["stale"] is None, "a hit from another project has stale = null (unknown)")

            step("B3 apply beta's reference fix (stands in for the agent applying the remembered fix)")
            changed = apply_reference_fix("scenario_beta", workspace)
            print(f"   edited: {', '.join(changed)}")
            result = await session.call_tool("run_tests", {})
            show(result)
            out = result.structured_content
            expect(out["passed"] is True, "beta's tests pass")

            step("B4 store beta's fix")
            result = await session.call_tool("store_fix_memory", {
                "fix_description": ("Configured sink names from a comma-separated env value kept surrounding "
                                    "whitespace and mixed case ('Audit-Log', ' Metrics'). Fix: strip(), lower() and "
                                    "replace '-' with '_' for each entry; skip blank entries."),
                "error_type": "AssertionError",
                "file_paths": changed,
                "outcome": out["confirmed_outcome"],
            })
            show(result)
            expect(not result.is_error and result.structured_content["verified"] is True, "beta's fix stored as verified")


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspaces and store")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="astra-demo-"))
    try:
        alpha, beta, db = tmp / "scenario_alpha", tmp / "scenario_beta", tmp / "db"
        shutil.copytree(ROOT / "demo_projects" / "scenario_alpha", alpha)
        shutil.copytree(ROOT / "demo_projects" / "scenario_beta", beta)
        print(f"workspaces and store under {tmp}")
        memory_id = await session_a(args.binary, db, alpha)
        await session_b(args.binary, db, beta, memory_id)
        print("\nDEMO PASSED: a fix verified in scenario_alpha was found first from scenario_beta's symptoms.")
        return 0
    except StepFailed as e:
        print(f"\nDEMO FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
