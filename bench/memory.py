"""Resident memory of one `astra-mcp serve --stdio` under a long stream of tool calls: alternating
`archival_memory_insert` (a new passage each, so the store grows by one passage and two conversation items
per pair) and `archival_memory_search` for the passage just stored, on a fresh store. Prints VmRSS, RssAnon
(the process's own memory) and RssFile (mapped files: the binary and the model) from /proc every
`--every` calls. Flat RssAnon with a small `--store-cache-mib` means nothing grows but the caches.

    python3 bench/memory.py [--binary BIN] [--calls 10000] [--every 2000] [-- SERVE FLAGS...]
    python3 bench/memory.py --calls 10000 -- --store-cache-mib 16

Linux only (/proc). Pure standard library (no bench venv needed). Figures: docs/internals/fuzzing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of `pid`, in MiB."""
    text = open(f"/proc/{pid}/status").read()
    return {key: int(text.split(key + ":")[1].split()[0]) // 1024 for key in ("VmRSS", "RssAnon", "RssFile")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_binary = os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "astra-mcp/target/release/astra-mcp"
    )
    parser.add_argument("--binary", default=default_binary)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=2_000)
    parser.add_argument("serve_flags", nargs="*", help="flags for `serve --stdio`, after `--`")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp:
        server = subprocess.Popen(
            [args.binary, "serve", "--stdio", "--db", os.path.join(temp, "db"), "--actor", "bench", *args.serve_flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

        def call(request_id: int, method: str, params: dict) -> dict:
            server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + "\n")
            server.stdin.flush()
            reply = json.loads(server.stdout.readline())
            if "error" in reply or reply.get("result", {}).get("isError"):
                raise SystemExit(f"call {request_id} ({method}) failed: {reply}")
            return reply

        call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        server.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        started = time.monotonic()
        print("calls\tseconds\tVmRSS MiB\tRssAnon MiB\tRssFile MiB", flush=True)
        for i in range(1, args.calls + 1):
            if i % 2:
                text = f"note {i} about widget kq{i}z and its retry_limit"
                call(i, "tools/call", {"name": "archival_memory_insert", "arguments": {"text": text}})
            else:
                call(i, "tools/call", {"name": "archival_memory_search", "arguments": {"query": f"widget kq{i - 1}z"}})
            if i % args.every == 0:
                s = status(server.pid)
                print(f"{i}\t{time.monotonic() - started:.0f}\t{s['VmRSS']}\t{s['RssAnon']}\t{s['RssFile']}", flush=True)
        server.stdin.close()
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
