"""Response time of every page of the memory browser (docs/ui.md) on a store of N fixes, N archival passages
and N conversation items (default 10k each, one actor), through `serve --http` on loopback, warm.

    python3 bench/ui.py [--binary BIN] [--rows 10000] [--runs 30] [--keep DIR]

The store: `bench populate` writes N archival passages (the dataset's texts, real vectors plus noise), then
`memory import` adds N fixes and N conversation items in N/50 sessions (the dataset's texts with seeded unit
vectors), then a session over MCP writes five versions of a core block. Each page is fetched 3 times
unmeasured, then `--runs` times, each answer checked (status 200 and a marker of the page) so a broken page
is never timed. The time is the client's, from sending the request to the last byte of the answer.
Pure standard library (no bench venv needed).
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import dataset  # noqa: E402
from common import StdioServer, dev_binary, machine_facts  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ACTOR = "bench"
PROJECT = "shop"
ITEMS_PER_SESSION = 50


def run(argv: list) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} failed:\n{done.stderr}")
    return done


def unit_vector(rng: random.Random) -> list:
    v = [rng.gauss(0, 1) for _ in range(384)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def build_store(binary: str, db: Path, rows: int, work: Path) -> None:
    texts = work / "texts.txt"
    texts.write_text("\n".join(dataset.one_line(dataset.passage_row(1, i).text) for i in range(300)) + "\n")
    t0 = time.perf_counter()
    run([dev_binary(binary), "bench", "populate", "--db", str(db), "--actor", ACTOR, "--project", PROJECT,
         "--texts", str(texts), "--rows", str(rows)])
    print(f"  {rows} archival passages in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    header = run([binary, "memory", "export", "--db", str(db), "--actor", ACTOR]).stdout.splitlines()[0]
    rng = random.Random(7)
    lines = [header]
    for i in range(rows):
        r = dataset.fix_row(1, i)
        lines.append(json.dumps({"table": "fixes", "row": {
            "id": r.id, "actor_id": ACTOR, "project": PROJECT, "session_id": r.id,
            "created_at": r.created_at, "updated_at": r.created_at, "fix_description": r.fix_description,
            "error_type": r.error_type, "error_type_key": r.error_type.lower(), "file_paths": r.file_paths,
            "outcome": r.outcome, "verified": i % 3 != 0, "receipt": None,
            "embedded_text": r.embedded_text, "vector": unit_vector(rng)}}))
    start = datetime(2026, 10, 1, tzinfo=timezone.utc)
    for i in range(rows):
        session, turn = divmod(i, ITEMS_PER_SESSION)
        text = dataset.one_line(dataset.passage_row(2, i).text)
        at = (start + timedelta(minutes=session * 90 + turn)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(json.dumps({"table": "session_items", "row": {
            "id": f"00000000-0000-4000-8000-{i:012d}", "actor_id": ACTOR, "project": PROJECT,
            "session_id": f"bench-session-{session:05d}", "turn": turn,
            "role": ("user", "assistant", "tool")[turn % 3], "source": "bench",
            "source_key": f"{session}:{turn}", "text": text, "created_at": at, "updated_at": at,
            "embedded_text": text, "search_text": text, "vector": unit_vector(rng)}}))
    imports = work / "rows.jsonl"
    imports.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    run([binary, "memory", "import", "--db", str(db), "--actor", ACTOR, str(imports)])
    print(f"  {rows} fixes and {rows} conversation items in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    server = StdioServer([binary, "serve", "--stdio", "--db", str(db), "--actor", ACTOR,
                          "--project", PROJECT]).start()
    try:
        server.initialize("2025-06-18")
        for n in range(5):
            server.call_tool("core_memory_append", {"section": "project", "text": f"Fact {n}: the shop runs on "
                             f"{n + 2} workers and deploys from main after review."})
    finally:
        server.stop()


def pages(rows: int) -> list[tuple[str, str, str]]:
    """(name, path, a marker the answer must hold)."""
    last = (rows + 24) // 25
    return [
        ("overview", "/", "Added per day"),
        ("fixes, first page", "/fixes", "Files now"),
        ("fixes, last page", f"/fixes?page={last}", "Files now"),
        ("fix", "/fixes/{fix}", "Receipt"),
        ("archival, first page", "/archival", "Filter"),
        ("archival, last page", f"/archival?page={last}", "Filter"),
        ("passage", "/archival/{passage}", "Forget this passage"),
        ("conversations", "/conversations", "Items"),
        ("conversation (50 items)", "/conversations/bench-session-00007", "turn 49"),
        ("core memory", "/core", "project"),
        ("core block with diff", "/core/project?from=4&to=5", "Changes from version 4 to 5"),
        ("search, all tables", "/search?q=connection+pool+exhausted+under+load&table=all", "Conversation"),
        ("search, fixes", "/search?q=TypeError+in+the+checkout+handler&table=fixes", "Fixes"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("ASTRA_MCP_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/astra-mcp/target")) / "release/astra-mcp"))
    ap.add_argument("--rows", type=int, default=10000, help="rows of each table")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (reused when it exists)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="astra-ui-bench-"))
    db = args.keep or work / "db"
    if not db.exists():
        print(f"building a store of {args.rows} rows per table at {db}", file=sys.stderr)
        build_store(args.binary, db, args.rows, work)
    server = subprocess.Popen([args.binary, "serve", "--http", "127.0.0.1:0", "--db", str(db), "--actor", ACTOR,
                               "--project", PROJECT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "ASTRA_LOG": "warn"})
    try:
        base = server.stdout.readline().strip().removesuffix("/mcp")
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

        def fetch(path: str) -> tuple[float, int, str]:
            t0 = time.perf_counter()
            with opener.open(base + path) as response:
                body = response.read().decode()
                return (time.perf_counter() - t0) * 1000, response.status, body

        _, _, fixes = fetch("/fixes")
        _, _, archival = fetch("/archival")
        ids = {"fix": fixes.split('href="/fixes/')[1].split('"')[0],
               "passage": archival.split('href="/archival/')[1].split('"')[0]}
        results = []
        for name, path, marker in pages(args.rows):
            path = path.format(**ids)
            times = []
            for i in range(3 + args.runs):
                ms, status, body = fetch(path)
                if status != 200 or marker not in body:
                    sys.exit(f"{path}: status {status}, marker {marker!r} missing:\n{body[:2000]}")
                if i >= 3:
                    times.append(ms)
            times.sort()
            results.append({"page": name, "path": path, "p50_ms": round(statistics.median(times), 1),
                            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
                            "max_ms": round(times[-1], 1), "bytes": len(body.encode())})
    finally:
        server.terminate()
        server.wait()
    report = {"rows_per_table": args.rows, "runs": args.runs, "machine": machine_facts(), "pages": results}
    width = max(len(r["page"]) for r in results)
    print(f"{'page':<{width}}  {'p50 ms':>7}  {'p95 ms':>7}  {'max ms':>7}  {'bytes':>7}", file=sys.stderr)
    for r in results:
        print(f"{r['page']:<{width}}  {r['p50_ms']:>7}  {r['p95_ms']:>7}  {r['max_ms']:>7}  {r['bytes']:>7}",
              file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
