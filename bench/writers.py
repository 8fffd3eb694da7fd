"""Acknowledged writes per second with several writers on one store: PROCESSES `astra-mcp serve --stdio`
processes on one `--db`, each with SESSIONS writers in flight at once (one request outstanding per writer,
the next sent when its answer arrives), every writer inserting INSERTS new archival passages. Prints the
acknowledged writes per second of the whole run and the latency of one insert (p50, p99). With
`--searcher`, one more process on the store runs `archival_memory_search` calls one after another while
the writes go on, and the latency of one search is printed too. With `--forgetter`, one more process
stores FORGETS passages before the writes start and forgets them (`memory_forget`) one after another while
the writes go on, and the latency of one forget is printed too.

The store is a fresh directory, or, with `--s3`, a fresh prefix in a bucket of the S3-compatible test
server (`tests/s3-server`, built by `scripts/test`) started on loopback for the run.

    python3 bench/writers.py [--binary BIN] [--processes 2] [--sessions 4] [--inserts 50] [--s3] [--searcher]
        [--forgetter] [--forgets 40]

Pure standard library (no bench venv needed). Figures: BENCHMARKS.md; what they taught:
docs/internals/writes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "astra-mcp")


class Server:
    """One `serve --stdio` process; `call` may be used from several threads at once."""

    def __init__(self, binary: str, db: str, name: str, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [binary, "serve", "--stdio", "--db", db, "--actor", "bench"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        self.lock = threading.Lock()
        self.waiting: dict[int, list] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": f"bench-{name}", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict) -> None:
        with self.lock:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()

    def _read(self) -> None:
        for line in self.proc.stdout:
            reply = json.loads(line)
            slot = self.waiting.pop(reply.get("id"), None)
            if slot is not None:
                slot.append(reply)
                slot[0].set()

    def call(self, method: str, params: dict) -> dict:
        with self.lock:
            self.next_id += 1
            request_id = self.next_id
        slot = [threading.Event()]
        self.waiting[request_id] = slot
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        if not slot[0].wait(600):
            raise SystemExit(f"no answer to {method} {request_id} within 600 s")
        reply = slot[1]
        if "error" in reply or reply.get("result", {}).get("isError"):
            raise SystemExit(f"{method} failed: {reply}")
        return reply

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.path.join(CACHE, "target/release/astra-mcp"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--inserts", type=int, default=50, help="inserts per writer")
    parser.add_argument("--s3", action="store_true", help="a bucket of the S3 test server instead of a directory")
    parser.add_argument("--searcher", action="store_true", help="a process that searches while the writes go on")
    parser.add_argument("--forgetter", action="store_true",
                        help="a process that forgets passages it stored while the writes go on")
    parser.add_argument("--forgets", type=int, default=40, help="passages the forgetter stores, then forgets")
    parser.add_argument("--s3-server", default=os.environ.get(
        "ASTRA_S3_TEST_SERVER", os.path.join(CACHE, "s3-server-target/release/astra-s3-test-server")))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp:
        env = dict(os.environ, ASTRA_LOG="warn")
        s3 = None
        if args.s3:
            os.makedirs(os.path.join(temp, "s3", "bench"))
            s3 = subprocess.Popen([args.s3_server, "--access-key", "bench", "--secret-key", "bench-secret",
                                   os.path.join(temp, "s3")], stdout=subprocess.PIPE, text=True)
            endpoint = s3.stdout.readline().split()[-1]
            env.update(AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true", AWS_REGION="us-east-1",
                       AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret")
            db = "s3://bench/store"
        else:
            db = os.path.join(temp, "db")
        try:
            servers = [Server(args.binary, db, f"p{p}", env) for p in range(args.processes)]
            latencies: list[float] = []

            def writer(server: Server, p: int, s: int) -> None:
                for i in range(args.inserts):
                    text = f"Writer {p}.{s} note {i}: the service wq{p}x{s}x{i}z drains its queue every {i % 9 + 1} minutes."
                    t = time.monotonic()
                    server.call("tools/call", {"name": "archival_memory_insert", "arguments": {"text": text}})
                    latencies.append(time.monotonic() - t)

            threads = [threading.Thread(target=writer, args=(srv, p, s))
                       for p, srv in enumerate(servers) for s in range(args.sessions)]
            searches: list[float] = []
            writing = threading.Event()
            searcher = None
            if args.searcher:
                reader = Server(args.binary, db, "searcher", env)
                servers.append(reader)

                def search() -> None:
                    i = 0
                    while writing.is_set():
                        t = time.monotonic()
                        reader.call("tools/call", {"name": "archival_memory_search", "arguments": {
                            "query": f"how often does the service wq0x{i % 4}x{i % 25}z drain its queue"}})
                        searches.append(time.monotonic() - t)
                        i += 1

                searcher = threading.Thread(target=search)
            forgets: list[tuple[float, float]] = []  # (started, seconds)
            forgetter = None
            if args.forgetter:
                remover = Server(args.binary, db, "forgetter", env)
                servers.append(remover)
                ids = [remover.call("tools/call", {"name": "archival_memory_insert", "arguments": {
                    "text": f"Passage {i} to forget: the cache entry fz{i}q expires after {i % 7 + 2} hours."}}
                )["result"]["structuredContent"]["id"] for i in range(args.forgets)]

                def forget() -> None:
                    for memory_id in ids:
                        t = time.monotonic()
                        remover.call("tools/call", {"name": "memory_forget", "arguments": {"id": memory_id}})
                        forgets.append((t, time.monotonic() - t))

                forgetter = threading.Thread(target=forget)
            writing.set()
            started = time.monotonic()
            for t in threads:
                t.start()
            if searcher is not None:
                searcher.start()
            if forgetter is not None:
                forgetter.start()
            for t in threads:
                t.join()
            ended = time.monotonic()
            seconds = ended - started
            writing.clear()
            if searcher is not None:
                searcher.join()
            if forgetter is not None:
                forgetter.join()
            for srv in servers:
                srv.close()
        finally:
            if s3 is not None:
                s3.kill()
        writes = len(latencies)
        searched = {"searches": len(searches), "search_p50_ms": round(1000 * percentile(searches, 0.5)),
                    "search_p99_ms": round(1000 * percentile(searches, 0.99))} if searches else {}
        if forgets:
            took = [d for _, d in forgets]
            searched.update(forgets=len(forgets), forgets_during_writes=sum(1 for t, _ in forgets if t < ended),
                            forget_p50_ms=round(1000 * percentile(took, 0.5)),
                            forget_p90_ms=round(1000 * percentile(took, 0.9)), forget_max_ms=round(1000 * max(took)))
        print(json.dumps({
            "store": "s3 (tests/s3-server on loopback)" if args.s3 else "local directory",
            "processes": args.processes, "sessions": args.sessions, "writes": writes,
            "seconds": round(seconds, 1), "writes_per_s": round(writes / seconds, 1),
            "p50_ms": round(1000 * percentile(latencies, 0.5)), "p99_ms": round(1000 * percentile(latencies, 0.99)),
            **searched,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
