#!/usr/bin/env python3
"""Several real `astra-mcp serve` processes on one store, driven by the official MCP Python SDK (issue 4).

Three checks, each against real server processes over stdio (run in the order A, C, B):

A. Concurrent writers lose nothing. Two servers on the same --db directory each pass the gates once
   (search_codebase_memory, then a passing run_tests: the confirmed outcome is not used up by a store, so
   one pass backs every store of the session, see src/memory/fixes.rs `store_fix`), then both fire
   STORES distinct store_fix_memory calls and INSERTS distinct archival_memory_insert calls at once (every
   call of both sessions in flight together, shuffled). Afterwards a THIRD, fresh process looks for every acknowledged id:
   `astra-mcp memory list --json` for all of them, `memory show` for a sample, and a new server's searches
   for a sample (each memory carries a unique token, so a keyword search must return it).
B. SIGKILL durability. A server gets KILL_WRITES concurrent writes and is SIGKILLed once KILL_AFTER of
   them were acknowledged (while others are still in flight). A new process must open the store, and
   every id acknowledged before the kill must be in it; then a new server writes and searches on it.
   Repeated KILL_ROUNDS times on the same directory (the second kill hits a store that survived one).
C. Visibility. Two running servers on one directory: a write acknowledged by one is found by a search
   through the other; the delay from the write's acknowledgement to the first search that returns it is
   measured over VIS_TRIALS trials (both directions, fixes and passages) and must stay under 1 s.
D. Read-before-write from two processes at once. Two servers insert the same SAME passages at once (each
   with its own tag): each text is stored once, with both tags (an insert-if-absent, then a tag merge);
   both append APPENDS lines to one core block at once: every line is in the block and its versions run
   1..2*APPENDS without a gap or a repeat; two `sessions import` processes import the same transcripts
   at once: each conversation item is stored once.

Where the store lives: a directory under SCRATCH_DIR, or, with MP_DB_BASE=s3://bucket/prefix, in that
bucket (the AWS_* variables of the environment reach every process). Every process runs as its own
machine: its own HOME and caches under SCRATCH_DIR/homes, sharing only the store (and the read-only
model, ASTRA_CACHE_DIR).

Usage: multiprocess.py BINARY SCRATCH_DIR WORKSPACE TEST_COMMAND [FIX_SOURCE]

  WORKSPACE     a project to copy for each server (e.g. demo_projects/scenario_alpha)
  TEST_COMMAND  its test command (e.g. `<venv>/bin/python -m pytest -q -p no:cacheprovider`)
  FIX_SOURCE    optional tree copied over each workspace copy so the tests pass
                (e.g. scripts/reference_fixes/scenario_alpha); without it WORKSPACE must pass as is.

Sizes (environment): MP_STORES=200 MP_INSERTS=200 (per process, check A), MP_KILL_WRITES=300,
MP_KILL_AFTER=100, MP_KILL_ROUNDS=2 (check B), MP_VIS_TRIALS=10 (check C), MP_SEARCH_SAMPLE=20,
MP_WRITE_TIMEOUT=300 (seconds a burst of writes may take before the servers count as stuck), MP_SEED=4,
MP_SAME=30 MP_APPENDS=15 (check D).

Prints progress, then as the last stdout line one JSON object with the counts and timings. Exits 1 with a
`FAILED: ...` message on stderr when anything acknowledged is missing, a write fails or gets no answer within
MP_WRITE_TIMEOUT, the store does not open, or a write takes longer than 1 s to become visible.
"""

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

STORES = int(os.environ.get("MP_STORES", "200"))
INSERTS = int(os.environ.get("MP_INSERTS", "200"))
KILL_WRITES = int(os.environ.get("MP_KILL_WRITES", "300"))
KILL_AFTER = int(os.environ.get("MP_KILL_AFTER", "100"))
KILL_ROUNDS = int(os.environ.get("MP_KILL_ROUNDS", "2"))
VIS_TRIALS = int(os.environ.get("MP_VIS_TRIALS", "10"))
SAME = int(os.environ.get("MP_SAME", "30"))
APPENDS = int(os.environ.get("MP_APPENDS", "15"))
DB_BASE = os.environ.get("MP_DB_BASE")
SEARCH_SAMPLE = int(os.environ.get("MP_SEARCH_SAMPLE", "20"))
# A burst of writes that has not finished after this long is reported as stuck, not waited for forever.
WRITE_TIMEOUT_S = float(os.environ.get("MP_WRITE_TIMEOUT", "300"))
VISIBILITY_LIMIT_S = 1.0
ACTOR = "multiprocess"

failures = []  # every failed check, reported together at the end


def fail(message):
    """Records a failed check (the run goes on, so one report shows everything that went wrong)."""
    failures.append(message)
    print(f"FAILED: {message}", file=sys.stderr, flush=True)


def log(message):
    print(message, flush=True)


def text_of(result):
    return "\n".join(b.text for b in result.content if b.type == "text")


class ToolFailed(Exception):
    pass


# --------------------------------------------------------------------------------------------- servers


class Server:
    """One `astra-mcp serve` process and the SDK session connected to it."""

    def __init__(self, name, session, pid, stderr_path):
        self.name, self.session, self.pid, self.stderr_path = name, session, pid, stderr_path

    async def call(self, tool, arguments):
        """Calls a tool; a tool result with isError raises ToolFailed with the server's text."""
        result = await self.session.call_tool(tool, arguments)
        if result.is_error:
            raise ToolFailed(f"{self.name} {tool}: {text_of(result)}")
        return result.structured_content


@asynccontextmanager
async def server(ctx, name, db, workspace=None):
    """Starts `astra-mcp serve --stdio` through the SDK's stdio_client. The server is started through
    `sh -c 'echo $$ > pidfile; exec ...'` so its pid is known (the SDK does not expose it) for SIGKILL."""
    logs = ctx["scratch"] / "logs"
    logs.mkdir(exist_ok=True)
    pidfile = logs / f"{name}.pid"
    stderr_path = logs / f"{name}.stderr"
    args = [ctx["binary"], "serve", "--stdio", "--db", str(db), "--actor", ACTOR]
    if workspace is not None:
        args += ["--workspace", str(workspace), "--test-command", ctx["test_command"]]
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *args],
        env=machine_env(ctx, name, {k: v for k, v in os.environ.items() if k.startswith(("ASTRA_", "ORT_", "AWS_"))}),
    )
    with open(stderr_path, "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()  # the SDK validates structuredContent against these schemas
                yield Server(name, session, int(pidfile.read_text()), stderr_path)


def machine_env(ctx, name, env):
    """`env` with a HOME and caches of machine `name`'s own (under SCRATCH/homes)."""
    home = ctx["scratch"] / "homes" / name
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share")}


def store_at(ctx, name):
    """Where store `name` lives: under MP_DB_BASE when given, else in SCRATCH."""
    return f"{DB_BASE.rstrip('/')}/{name}" if DB_BASE else ctx["scratch"] / name


def workspace_copy(ctx, name):
    """A fresh copy of the workspace template (with FIX_SOURCE over it) for one server."""
    dest = ctx["scratch"] / "workspaces" / name / Path(ctx["workspace"]).name
    shutil.copytree(ctx["workspace"], dest)
    if ctx["fix_source"]:
        shutil.copytree(ctx["fix_source"], dest, dirs_exist_ok=True)
    return dest


def source_file(ctx, workspace):
    """The file the fixes name in `file_paths`: the first file FIX_SOURCE changed, else the workspace's
    first file (it must exist and be covered by the workspace digest, which the store checks)."""
    root = Path(ctx["fix_source"]) if ctx["fix_source"] else workspace
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())[0]


async def open_gates(srv):
    """The gates of design.md §3 for one session: a search, then a passing run_tests. Returns the
    confirmed outcome that every later store of this session passes as `outcome`."""
    await srv.call("search_codebase_memory",
                   {"query": "comma separated values keep surrounding whitespace", "error_type": None, "top_k": 3})
    run = await srv.call("run_tests", {})
    if not run["passed"] or not run["confirmed_outcome"]:
        raise SystemExit(f"FAILED: run_tests did not pass in {srv.name}'s workspace: {run['summary']}\n"
                         f"{run['output_tail']}")
    return run["confirmed_outcome"]


# Each memory carries a unique alphanumeric token (`tok...`): the full-text index keeps it as one term, so
# a keyword search for it must return exactly that memory.
async def store_fix(srv, outcome, path, token):
    out = await srv.call("store_fix_memory", {
        "fix_description": f"Change {token}: trim whitespace around each comma-separated value in {path} "
                           f"before comparing it (variant {token}).",
        "error_type": random.choice(["AssertionError", "ValueError", "KeyError"]),
        "file_paths": [path],
        "outcome": outcome,
    })
    if not out["created"]:
        raise ToolFailed(f"{srv.name} store_fix_memory {token}: created=false for a fix never stored before")
    return out["memory_id"]


async def insert_passage(srv, token, n):
    out = await srv.call("archival_memory_insert", {
        "text": f"Deployment note {token}: service number {n} needs {n % 17 + 2} minutes of cache warm-up "
                f"after each release; ticket {token}.",
        "tags": ["multiprocess", srv.name],
    })
    if out["deduplicated"]:
        raise ToolFailed(f"{srv.name} archival_memory_insert {token}: deduplicated=true for new text")
    return out["id"]


# ------------------------------------------------------------------------------ a third, fresh process


def operator(ctx, *args):
    """Runs `astra-mcp memory ...` (a new process that opens the store itself). Returns (rc, stdout,
    stderr, seconds)."""
    start = time.monotonic()
    proc = subprocess.run([ctx["binary"], "memory", *args], capture_output=True, text=True, timeout=300,
                          env=machine_env(ctx, "operator", dict(os.environ)))
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def stored_ids(ctx, db, table):
    """Every id of our actor in `table`, as listed by `memory list --json` (one fresh process)."""
    rc, out, err, secs = operator(ctx, "list", "--db", str(db), "--actor", ACTOR, "--table", table,
                                  "--limit", "10000000", "--json")
    if rc != 0:
        fail(f"`memory list --table {table}` on {db} exited {rc}: {err.strip()}")
        return [], secs
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()], secs


def open_check(ctx, db):
    """`memory stats --json` from a fresh process: the store opens and reads. Returns (rows per table, s)."""
    rc, out, err, secs = operator(ctx, "stats", "--db", str(db), "--json")
    if rc != 0:
        fail(f"the store at {db} did not open in a fresh process (`memory stats` exited {rc}): {err.strip()}")
        return None, secs
    return {t["table"]: t["rows"] for t in json.loads(out)}, secs


def compare(label, acknowledged, listed):
    """acknowledged ⊆ listed, and no id listed twice. Returns (found, lost ids, duplicate count)."""
    found_set = set(listed)
    lost = sorted(set(acknowledged) - found_set)
    duplicates = len(listed) - len(found_set)
    if lost:
        fail(f"{label}: {len(lost)} of {len(acknowledged)} acknowledged ids are missing, e.g. {lost[:5]}")
    if duplicates:
        fail(f"{label}: {duplicates} ids are listed more than once")
    return len(acknowledged) - len(lost), lost, duplicates


async def search_sample(ctx, db, fixes, passages):
    """A new server (no workspace: the searches need none) searches a sample of tokens; each search must
    return the memory that carries the token. Returns counts and per-search latencies."""
    found = {"fixes": 0, "passages": 0}
    latencies = []
    async with server(ctx, "searcher", db) as srv:
        for kind, items in (("fixes", fixes), ("passages", passages)):
            for token, memory_id in random.sample(items, min(SEARCH_SAMPLE, len(items))):
                start = time.monotonic()
                if kind == "fixes":
                    out = await srv.call("search_codebase_memory", {"query": token, "error_type": None, "top_k": 3})
                    ids = [m["memory_id"] for m in out["matches"]]
                else:
                    out = await srv.call("archival_memory_search",
                                         {"query": token, "tags": None, "top_k": 3, "start": None, "end": None})
                    ids = [r["id"] for r in out["results"]]
                latencies.append(time.monotonic() - start)
                if memory_id in ids:
                    found[kind] += 1
                else:
                    fail(f"search sample: searching `{token}` did not return {kind[:-1]} {memory_id} (got {ids})")
    sampled = {"fixes": min(SEARCH_SAMPLE, len(fixes)), "passages": min(SEARCH_SAMPLE, len(passages))}
    return {"sampled": sampled, "found": found, "p50_ms": ms(median(latencies)), "max_ms": ms(max(latencies, default=0))}


def show_sample(ctx, db, items, table, k=5):
    """`memory show ID` (one fresh process per id) for a few ids: each must come back from `table`."""
    shown = 0
    for _token, memory_id in random.sample(items, min(k, len(items))):
        rc, out, err, _ = operator(ctx, "show", "--db", str(db), "--actor", ACTOR, memory_id)
        if rc == 0 and json.loads(out)["table"] == table:
            shown += 1
        else:
            fail(f"`memory show {memory_id}` (expected in {table}) exited {rc}: {err.strip() or out[:200]}")
    return shown


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def median(xs):
    return percentile(xs, 0.5)


def ms(seconds):
    return round(seconds * 1000, 1)


# -------------------------------------------------------------------------------- A: two writers at once


async def check_concurrent(ctx):
    db = store_at(ctx, "shared-db")
    log(f"[A] two servers on {db}: {STORES} stores + {INSERTS} archival inserts each, all at once")
    results = {}
    errors = []
    start = time.monotonic()
    async with server(ctx, "writer1", db, workspace_copy(ctx, "writer1")) as w1, \
            server(ctx, "writer2", db, workspace_copy(ctx, "writer2")) as w2:
        startup = time.monotonic() - start
        outcomes = await asyncio.gather(open_gates(w1), open_gates(w2))
        gates = time.monotonic() - start - startup
        paths = [source_file(ctx, workspace_copy_path(ctx, s.name)) for s in (w1, w2)]

        latencies = {"fix": [], "passage": []}  # seconds from the call to its acknowledgement

        async def one(kind, srv, outcome, path, p, i):
            token = f"tok{p}{kind[0]}{i:04d}"
            try:
                t = time.monotonic()
                if kind == "fix":
                    memory_id = await store_fix(srv, outcome, path, token)
                else:
                    memory_id = await insert_passage(srv, token, i)
                latencies[kind].append(time.monotonic() - t)
                results[(kind, p, i)] = (token, memory_id)
            except Exception as e:  # a refused or failed write: reported, and fails the check
                errors.append(f"{kind} {token}: {type(e).__name__}: {e}")

        jobs = []
        for p, (srv, outcome, path) in enumerate(zip((w1, w2), outcomes, paths), start=1):
            jobs += [one("fix", srv, outcome, path, p, i) for i in range(STORES)]
            jobs += [one("passage", srv, outcome, path, p, i) for i in range(INSERTS)]
        random.shuffle(jobs)  # fixes and passages of both processes interleaved
        write_start = time.monotonic()
        tasks = [asyncio.create_task(job) for job in jobs]
        _, pending = await asyncio.wait(tasks, timeout=WRITE_TIMEOUT_S)
        write_secs = time.monotonic() - write_start
        if pending:
            fail(f"A: {len(pending)} of {len(jobs)} writes still had no answer after {WRITE_TIMEOUT_S:.0f} s "
                 f"({len(results)} acknowledged): the servers are stuck (see {ctx['scratch'] / 'logs'})")
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    latency = {kind: {"p50_ms": ms(median(xs)), "p95_ms": ms(percentile(xs, 0.95)), "max_ms": ms(max(xs, default=0))}
               for kind, xs in latencies.items()}
    log(f"[A] {len(results)} writes acknowledged, {len(errors)} failed, in {write_secs:.1f} s "
        f"({len(results) / write_secs:.0f} writes/s); server start {startup:.1f} s, gates {gates:.1f} s; "
        f"latency under this load {latency}")
    for e in errors[:10]:
        log(f"[A]   error: {e}")
    if errors:
        fail(f"A: {len(errors)} of {len(jobs)} concurrent writes failed; first: {errors[0]}")
    if len({memory_id for _, memory_id in results.values()}) != len(results):
        fail("A: two acknowledged writes returned the same id")

    # a third process, started after both writers exited
    fixes = [v for k, v in results.items() if k[0] == "fix"]
    passages = [v for k, v in results.items() if k[0] == "passage"]
    verify_start = time.monotonic()
    rows, open_secs = open_check(ctx, db)
    listed_fixes, list_fix_secs = stored_ids(ctx, db, "fixes")
    listed_passages, list_passage_secs = stored_ids(ctx, db, "archival")
    found_fixes, lost_fixes, dup_fixes = compare("A fixes", [m for _, m in fixes], listed_fixes)
    found_passages, lost_passages, dup_passages = compare("A passages", [m for _, m in passages], listed_passages)
    shown = show_sample(ctx, db, fixes, "fixes") + show_sample(ctx, db, passages, "archival")
    searched = await search_sample(ctx, db, fixes, passages)
    verify_secs = time.monotonic() - verify_start
    log(f"[A] third process: {found_fixes}/{len(fixes)} fixes and {found_passages}/{len(passages)} passages "
        f"listed; {shown} shown; search sample {searched['found']} of {searched['sampled']}; {verify_secs:.1f} s")
    return db, {
        "attempted": len(jobs),
        "acknowledged": {"fixes": len(fixes), "passages": len(passages)},
        "found": {"fixes": found_fixes, "passages": found_passages},
        "lost": {"fixes": len(lost_fixes), "passages": len(lost_passages)},
        "lost_ids": (lost_fixes + lost_passages)[:20],
        "duplicates": dup_fixes + dup_passages,
        "errors": len(errors),
        "first_errors": errors[:3],
        "table_rows": rows,
        "write_latency": latency,
        "shown_by_id": shown,
        "search_sample": searched,
        "seconds": {"startup": round(startup, 2), "gates": round(gates, 2), "writes": round(write_secs, 2),
                    "writes_per_s": round(len(results) / write_secs, 1), "open_third": round(open_secs, 2),
                    "list": round(list_fix_secs + list_passage_secs, 2), "verify_total": round(verify_secs, 2)},
    }


def workspace_copy_path(ctx, name):
    return ctx["scratch"] / "workspaces" / name / Path(ctx["workspace"]).name


# ------------------------------------------------------------------------------------- B: SIGKILL mid-write


async def check_kill(ctx, round_no, db):
    name = f"victim{round_no}"
    log(f"[B{round_no}] {KILL_WRITES} concurrent writes to {db}, SIGKILL after {KILL_AFTER} acknowledgements")
    before = {t: len(set(stored_ids(ctx, db, t)[0])) for t in ("fixes", "archival")} if round_no > 1 else {}
    acked = {}  # id -> kind, filled as responses arrive
    errors = []
    after_kill = []
    killed_at = None
    async with server(ctx, name, db, workspace_copy(ctx, name)) as srv:
        outcome = await open_gates(srv)
        path = source_file(ctx, workspace_copy_path(ctx, name))

        async def one(i):
            token = f"tokk{round_no}w{i:04d}"
            try:
                if i % 2 == 0:
                    acked[await store_fix(srv, outcome, path, token)] = "fixes"
                else:
                    acked[await insert_passage(srv, token, i)] = "archival"
            except ToolFailed as e:  # the server answered with an error: a real failure
                errors.append(str(e))
            except Exception as e:  # the connection died with the server: expected after the kill
                if killed_at is None:
                    errors.append(f"{token}: {type(e).__name__}: {e}")
                else:
                    after_kill.append(type(e).__name__)

        tasks = [asyncio.create_task(one(i)) for i in range(KILL_WRITES)]
        start = time.monotonic()
        while len(acked) < KILL_AFTER and not all(t.done() for t in tasks):
            if time.monotonic() - start > WRITE_TIMEOUT_S:
                fail(f"B{round_no}: only {len(acked)} writes acknowledged after {WRITE_TIMEOUT_S:.0f} s; killing anyway")
                break
            await asyncio.sleep(0.002)
        acked_at_kill = len(acked)
        in_flight = sum(not t.done() for t in tasks)
        os.kill(srv.pid, signal.SIGKILL)
        killed_at = time.monotonic() - start
        # The pending calls end with "Connection closed"; responses already in the pipe still arrive and
        # count as acknowledged (the server sent them before it died).
        done, pending = await asyncio.wait(tasks, timeout=30)
        for t in pending:
            t.cancel()
        if pending:
            fail(f"B{round_no}: {len(pending)} calls were still pending 30 s after the server was killed")
    log(f"[B{round_no}] killed pid {srv.pid} after {killed_at:.2f} s: {acked_at_kill} acknowledged at the kill, "
        f"{len(acked)} in all, {in_flight} in flight")
    if in_flight == 0:
        fail(f"B{round_no}: every write had finished before the kill; the kill tested nothing "
             f"(lower MP_KILL_AFTER or raise MP_KILL_WRITES)")
    if errors:
        fail(f"B{round_no}: {len(errors)} writes failed before the kill; first: {errors[0]}")

    # A fresh process opens the killed store and must hold every acknowledged write.
    rows, open_secs = open_check(ctx, db)
    listed = {}
    for table in ("fixes", "archival"):
        listed[table], _ = stored_ids(ctx, db, table)
    lost = []
    for table in ("fixes", "archival"):
        mine = [i for i, t in acked.items() if t == table]
        _, lost_here, _ = compare(f"B{round_no} {table}", mine, listed[table])
        lost += lost_here
    # rows this round committed (a write may land without its acknowledgement reaching the client)
    committed = sum(len(set(listed[t])) - before.get(t, 0) for t in listed)
    log(f"[B{round_no}] reopened in {open_secs:.2f} s: {len(acked) - len(lost)}/{len(acked)} acknowledged found; "
        f"{committed} rows of this round committed")

    # The store is not only readable: a new server writes to it and finds the write.
    reopen_start = time.monotonic()
    writable = False
    try:
        async with server(ctx, f"{name}-after", db) as srv:
            token = f"tokk{round_no}after"
            memory_id = await insert_passage(srv, token, 0)
            out = await srv.call("archival_memory_search",
                                 {"query": token, "tags": None, "top_k": 3, "start": None, "end": None})
            writable = memory_id in [r["id"] for r in out["results"]]
    except Exception as e:
        fail(f"B{round_no}: a new server could not write to the killed store: {type(e).__name__}: {e}")
    if not writable:
        fail(f"B{round_no}: after the kill, a new server's write was not found by its own search")
    return {
        "fired": KILL_WRITES,
        "acknowledged_at_kill": acked_at_kill,
        "acknowledged": len(acked),
        "in_flight_at_kill": in_flight,
        "calls_cut_by_kill": len(after_kill),
        "killed_after_s": round(killed_at, 2),
        "found": len(acked) - len(lost),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "committed_this_round": committed,
        "rows_after": rows,
        "errors_before_kill": len(errors),
        "reopen_s": round(open_secs, 2),
        "writable_after": writable,
        "write_after_s": round(time.monotonic() - reopen_start, 2),
    }


# ----------------------------------------------------------------------------------------- C: visibility


async def check_visibility(ctx, db):
    log(f"[C] two running servers on {db}: write through one, search through the other, {VIS_TRIALS} trials")
    trials = []
    async with server(ctx, "seer1", db, workspace_copy(ctx, "seer1")) as s1, \
            server(ctx, "seer2", db, workspace_copy(ctx, "seer2")) as s2:
        outcomes = dict(zip((s1.name, s2.name), await asyncio.gather(open_gates(s1), open_gates(s2))))
        for i in range(VIS_TRIALS):
            writer, reader = (s1, s2) if i % 2 == 0 else (s2, s1)
            kind = "fix" if (i // 2) % 2 == 0 else "passage"
            token = f"tokv{i:03d}"
            if kind == "fix":
                path = source_file(ctx, workspace_copy_path(ctx, writer.name))
                memory_id = await store_fix(writer, outcomes[writer.name], path, token)
            else:
                memory_id = await insert_passage(writer, token, i)
            acked = time.monotonic()
            polls, search_times = 0, []
            while True:  # search until the reader returns the new memory (give up after 10 s)
                polls += 1
                t0 = time.monotonic()
                if kind == "fix":
                    out = await reader.call("search_codebase_memory", {"query": token, "error_type": None, "top_k": 3})
                    ids = [m["memory_id"] for m in out["matches"]]
                else:
                    out = await reader.call("archival_memory_search",
                                            {"query": token, "tags": None, "top_k": 3, "start": None, "end": None})
                    ids = [r["id"] for r in out["results"]]
                search_times.append(time.monotonic() - t0)
                if memory_id in ids or time.monotonic() - acked > 10:
                    break
            delay = time.monotonic() - acked
            seen = memory_id in ids
            trials.append({"kind": kind, "writer": writer.name, "reader": reader.name, "seen": seen,
                           "delay_ms": ms(delay), "polls": polls, "search_ms": ms(search_times[-1])})
            log(f"[C] trial {i}: {kind} by {writer.name}, seen by {reader.name} after {ms(delay)} ms "
                f"({polls} searches)" if seen else f"[C] trial {i}: {kind} NOT seen after {ms(delay)} ms")
            if not seen or delay > VISIBILITY_LIMIT_S:
                fail(f"C: trial {i}: a {kind} written by {writer.name} took {ms(delay)} ms to be found by "
                     f"{reader.name} (limit {VISIBILITY_LIMIT_S * 1000:.0f} ms; seen={seen}, {polls} searches)")
    delays = [t["delay_ms"] for t in trials]
    return {"trials": len(trials), "delays_ms": delays, "max_ms": max(delays, default=0), "median_ms": median(delays),
            "first_search_hits": sum(t["polls"] == 1 for t in trials), "detail": trials}


# ---------------------------------------------------------------------------------------------- main


# ------------------------------------------------------------------- D: the same keys from two at once


def run_astra(ctx, machine, *args):
    """Runs the binary as machine `machine` (a new process). Returns (rc, stdout, stderr)."""
    proc = subprocess.run([ctx["binary"], *args], capture_output=True, text=True, timeout=300,
                          env=machine_env(ctx, machine, dict(os.environ)))
    return proc.returncode, proc.stdout, proc.stderr


async def check_contention(ctx, db):
    log(f"[D] two servers on {db}: the same {SAME} passages, {APPENDS} core block appends each, "
        f"and two imports of the same transcripts, all at once")
    errors = []
    texts = [f"Shared fact same{i:03d}x: the staging cluster {i} drains at {i % 12 + 1} am." for i in range(SAME)]
    lines = {}
    async with server(ctx, "same1", db) as a, server(ctx, "same2", db) as b:
        async def guarded(call):
            try:
                await asyncio.wait_for(call, WRITE_TIMEOUT_S)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        calls = [srv.call("archival_memory_insert", {"text": t, "tags": [srv.name]}) for t in texts for srv in (a, b)]
        for srv in (a, b):
            lines[srv.name] = [f"{srv.name} remembers item {i:02d}." for i in range(APPENDS)]
            calls += [srv.call("core_memory_append", {"section": "human", "text": line}) for line in lines[srv.name]]
        random.shuffle(calls)
        await asyncio.gather(*(guarded(c) for c in calls))
    for e in errors[:5]:
        fail(f"[D] a write failed: {e}")

    rc, out, err, _ = operator(ctx, "export", "--db", str(db), "--actor", ACTOR)
    if rc != 0:
        fail(f"[D] `memory export` exited {rc}: {err.strip()}")
        out = ""
    exported = [json.loads(line) for line in out.splitlines()[1:] if line.strip()]
    rows = [line["row"] for line in exported if line["table"] == "archival"]
    copies = {t: [r for r in rows if r["text"] == t] for t in texts}
    duplicated = [t for t, rs in copies.items() if len(rs) > 1]
    missing = [t for t, rs in copies.items() if not rs]
    untagged = [t for t, rs in copies.items() if rs and sorted(rs[0].get("tags", [])) != ["same1", "same2"]]
    if duplicated or missing:
        fail(f"[D] the same passage from two servers: {len(duplicated)} stored twice, {len(missing)} missing")
    if untagged:
        fail(f"[D] {len(untagged)} passages lost a tag of one server, e.g. {copies[untagged[0]][0].get('tags')}")

    rc, out, err = run_astra(ctx, "operator", "core", "history", "human", "--db", str(db), "--actor", ACTOR)
    versions = [int(line.split()[1]) for line in out.splitlines() if line.startswith("version ")]
    rc2, shown, err2 = run_astra(ctx, "operator", "core", "show", "human", "--db", str(db), "--actor", ACTOR)
    lost_lines = [line for ls in lines.values() for line in ls if line not in shown]
    if rc != 0 or rc2 != 0:
        fail(f"[D] `core history|show` exited {rc}/{rc2}: {err.strip()} {err2.strip()}")
    if versions != list(range(1, 2 * APPENDS + 1)):
        fail(f"[D] the block's versions are not 1..{2 * APPENDS}: {versions}")
    if lost_lines:
        fail(f"[D] {len(lost_lines)} appended lines are not in the block, e.g. {lost_lines[0]!r}")

    transcripts = sorted(str(p) for p in (Path(__file__).parent.parent / "fixtures" / "transcripts").glob("*.jsonl"))
    imports = [subprocess.Popen([ctx["binary"], "sessions", "import", "--db", str(db), "--actor", ACTOR, *transcripts],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=machine_env(ctx, f"import{n}", dict(os.environ))) for n in (1, 2)]
    for proc in imports:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            fail(f"[D] a concurrent `sessions import` exited {proc.returncode}: {err.strip()}")
    rc, out, err, _ = operator(ctx, "list", "--db", str(db), "--actor", ACTOR, "--table", "session_items",
                               "--limit", "100000", "--json")
    items = [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
    rc, single, err = run_astra(ctx, "operator", "sessions", "import", "--db", str(db), "--actor", ACTOR, *transcripts)
    rc, out, err, _ = operator(ctx, "list", "--db", str(db), "--actor", ACTOR, "--table", "session_items",
                               "--limit", "100000", "--json")
    after = [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
    if len(items) != len(set(items)) or not items:
        fail(f"[D] two imports at once stored {len(items)} items, {len(set(items))} distinct")
    if sorted(after) != sorted(items):
        fail(f"[D] importing a third time changed the items: {len(items)} then {len(after)}")
    result = {"passages": len(rows), "distinct_texts": sum(1 for rs in copies.values() if rs),
              "duplicated": len(duplicated), "untagged": len(untagged), "block_versions": len(versions),
              "lost_lines": len(lost_lines), "items": len(items), "distinct_items": len(set(items)),
              "errors": len(errors)}
    log(f"[D] {result}")
    return result


def log_problems(ctx):
    """WARN/ERROR lines the servers wrote to stderr (every server's stderr is under SCRATCH/logs)."""
    lines = []
    for path in sorted((ctx["scratch"] / "logs").glob("*.stderr")):
        for line in path.read_text(errors="replace").splitlines():
            if " WARN " in line or " ERROR " in line or "panicked" in line:
                lines.append(f"{path.stem}: {line.strip()}")
    return lines


async def main(binary, scratch, workspace, test_command, fix_source=None):
    scratch = Path(scratch).resolve()
    if scratch.exists() and any(scratch.iterdir()):
        raise SystemExit(f"FAILED: {scratch} is not empty: give a new or empty scratch directory")
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = {"binary": str(Path(binary).resolve()), "scratch": scratch, "workspace": str(Path(workspace).resolve()),
           "test_command": test_command, "fix_source": fix_source and str(Path(fix_source).resolve())}
    random.seed(int(os.environ.get("MP_SEED", "4")))
    t0 = time.monotonic()
    timings = {}

    shared_db, concurrent = await check_concurrent(ctx)
    timings["A_s"] = round(time.monotonic() - t0, 1)

    t = time.monotonic()
    visibility = await check_visibility(ctx, shared_db)
    timings["C_s"] = round(time.monotonic() - t, 1)

    t = time.monotonic()
    kills = [await check_kill(ctx, r, store_at(ctx, "kill-db")) for r in range(1, KILL_ROUNDS + 1)]
    timings["B_s"] = round(time.monotonic() - t, 1)

    t = time.monotonic()
    contention = await check_contention(ctx, store_at(ctx, "contention-db"))
    timings["D_s"] = round(time.monotonic() - t, 1)
    timings["total_s"] = round(time.monotonic() - t0, 1)

    problems = log_problems(ctx)
    for line in problems[:20]:
        log(f"server log: {line}")
    summary = {
        "ok": not failures,
        "concurrent": concurrent,
        "kill": kills,
        "visibility": visibility,
        "contention": contention,
        "timings": timings,
        "server_log_warnings": len(problems),
        "failures": failures,
    }
    print(json.dumps(summary), flush=True)
    if failures:
        print(f"FAILED: {len(failures)} check(s) failed: " + "; ".join(failures[:5]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
