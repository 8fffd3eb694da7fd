"""The measurements over stdio: cold start (spawn -> initialize -> tools/list -> first search) and warm
search latency, with the server's resident memory, for any MCP server described by a `Target`.
Every time is wall-clock from this process, raw JSON-RPC over pipes, one request in flight at a time.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common import StdioServer, process_memory, summarize
from dataset import Query

PROBE_VERSION = "2099-01-01"  # a version no server knows: the answer is the newest one it speaks


@dataclass
class Target:
    """How to start one MCP server and run its search tool."""

    name: str
    argv: list[str]
    env: dict | None
    tool: str
    arguments: Callable[[str], dict]  # query text -> tool arguments
    hit: Callable[[dict, Query], bool]  # tool result, query -> did the query's target come back
    stderr: Path | None = None

    def spawn(self) -> StdioServer:
        """Starts the server (stderr appended to `self.stderr`)."""
        return StdioServer(self.argv, env=self.env, stderr_path=self.stderr).start()


def negotiated_version(argv: list[str]) -> str:
    """The protocol version the server `argv` answers to an `initialize` naming an unknown version."""
    server = StdioServer(argv).start()
    try:
        return server.initialize(PROBE_VERSION)["protocolVersion"]
    finally:
        server.stop()


def cold_start_once(target: Target, version: str, query: str) -> dict:
    """One fresh process: ms from spawn to the `initialize` answer, to the `tools/list` answer (sent right
    after `notifications/initialized`), and to the first search result (sent right after that); RSS then."""
    server = target.spawn()
    try:
        server.initialize(version)
        t_init = server.elapsed()
        server.request("tools/list")
        t_list = server.elapsed()
        server.call_tool(target.tool, target.arguments(query))
        t_search = server.elapsed()
        mem = process_memory(server.pid)
    finally:
        server.stop()
    return {"initialize_ms": t_init * 1000, "tools_list_ms": t_list * 1000, "first_search_ms": t_search * 1000,
            "rss_after_first_search_mib": mem.get("rss_mib")}


def cold_start(targets: list[Target], version: str, runs: int, queries: list[Query], log=print) -> dict:
    """`runs` cold starts of each target, interleaved (A, B, A, B, ...) so a busy moment hits both;
    a different query each run. Median and spread per figure and target."""
    samples: dict[str, list[dict]] = {t.name: [] for t in targets}
    for i in range(runs):
        for t in targets:
            samples[t.name].append(cold_start_once(t, version, queries[i % len(queries)].text))
        log(f"  cold start run {i + 1}/{runs}: " + ", ".join(
            f"{name} init {s[-1]['initialize_ms']:.0f} ms, first search {s[-1]['first_search_ms']:.0f} ms"
            for name, s in samples.items()))
    out = {}
    for name, runs_ in samples.items():
        out[name] = {key: summarize([r[key] for r in runs_ if r[key] is not None], 1)
                     for key in ("initialize_ms", "tools_list_ms", "first_search_ms", "rss_after_first_search_mib")}
    return out


def warm_search(target: Target, version: str, queries: list[Query], warmup: int, idle_wait: float) -> dict:
    """One server process: initialize, RSS right after it and after `idle_wait` s of idling (the model
    loads in the background meanwhile), `warmup` untimed searches, then each query timed; the share of
    queries whose target came back (a check that the store and the search work, not a quality score);
    RSS after the searches."""
    server = target.spawn()
    try:
        server.initialize(version)
        rss_init = process_memory(server.pid)
        time.sleep(idle_wait)
        rss_idle = process_memory(server.pid)
        for q in queries[:warmup]:
            server.call_tool(target.tool, target.arguments(q.text))
        log_offset = target.stderr.stat().st_size if target.stderr and target.stderr.exists() else 0
        latencies, hits = [], 0
        for q in queries[warmup:]:
            t0 = time.perf_counter()
            result = server.call_tool(target.tool, target.arguments(q.text))
            latencies.append((time.perf_counter() - t0) * 1000)
            hits += bool(target.hit(result, q))
        rss_after = process_memory(server.pid)
    finally:
        server.stop()
    stages = stage_summary(server_stage_lines(target.stderr, log_offset), latencies) if target.stderr else {}
    return {
        "latency_ms": summarize(latencies, 2),
        # astra-mcp only: its own per-search timings (ms) from its debug log, and latency minus embedding
        **({"server_stages_ms": stages} if stages else {}),
        "target_found_rate": round(hits / len(latencies), 3) if latencies else None,
        "rss_after_initialize_mib": rss_init.get("rss_mib"),
        "rss_idle_mib": rss_idle.get("rss_mib"),
        "rss_after_searches_mib": rss_after.get("rss_mib"),
        "peak_rss_mib": rss_after.get("peak_rss_mib"),
    }


TIMING_LINE = re.compile(r"search timings (.*)$")
TIMING_FIELD = re.compile(r"(\w+)=([0-9.]+)")
ASTRA_SEARCH_LOG = "warn,astra_mcp=info,astra_mcp::search=debug"  # adds one "search timings" line per search


def server_stage_lines(stderr: Path, offset: int) -> list[dict]:
    """astra-mcp's "search timings" debug lines written after `offset` bytes of its stderr, one dict of
    ms per search (embed_ms, keyword_ms, vector_ms, decode_ms, total_ms), in order."""
    if not stderr.exists():
        return []
    with open(stderr, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    rows = []
    for line in text.splitlines():
        m = TIMING_LINE.search(line)
        if m:
            rows.append({k: float(v) for k, v in TIMING_FIELD.findall(m.group(1))})
    return rows


def stage_summary(rows: list[dict], latencies: list[float]) -> dict:
    """Median and spread of each field of `rows` (server-side ms per search), plus `rest_ms`: each call's
    latency seen over stdio minus that call's own embedding time (the server's cost beside the model,
    protocol included). Empty unless there is one line per timed call."""
    if not rows or len(rows) != len(latencies):
        return {}
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    out = {k: summarize([r[k] for r in rows], 2) for k in keys}
    if "embed_ms" in keys:
        out["rest_ms"] = summarize([lat - r["embed_ms"] for lat, r in zip(latencies, rows)], 2)
    return out


# ---------------------------------------------------------------------------------------------------------
# the two servers


def astra_fix_target(binary: str, db: Path, top_k: int, stderr: Path) -> Target:
    """astra-mcp serving `db` read-only in practice (no workspace), searched with search_codebase_memory."""
    return Target(
        name="astra-mcp",
        argv=[binary, "serve", "--stdio", "--db", str(db), "--log", ASTRA_SEARCH_LOG],
        env=None,
        tool="search_codebase_memory",
        arguments=lambda q: {"query": q, "error_type": None, "top_k": top_k},
        hit=lambda r, q: q.target_id in [m["memory_id"] for m in r["structuredContent"]["matches"]],
        stderr=stderr,
    )


def astra_archival_target(binary: str, db: Path, top_k: int, stderr: Path) -> Target:
    """astra-mcp serving `db`, searched with archival_memory_search."""
    return Target(
        name="astra-mcp archival",
        argv=[binary, "serve", "--stdio", "--db", str(db), "--log", ASTRA_SEARCH_LOG],
        env=None,
        tool="archival_memory_search",
        arguments=lambda q: {"query": q, "tags": None, "top_k": top_k, "start": None, "end": None},
        hit=lambda r, q: q.target_id in [m["id"] for m in r["structuredContent"]["results"]],
        stderr=stderr,
    )


def qdrant_target(argv: list[str], env: dict, documents: dict[str, str], stderr: Path) -> Target:
    """mcp-server-qdrant searched with qdrant-find (its limit: QDRANT_SEARCH_LIMIT, default 10); a hit
    is the target's document text in the answer (`documents`: target id -> stored text)."""
    def hit(result: dict, q: Query) -> bool:
        """Whether the target's stored text is one of the returned entries."""
        found = []
        for c in result.get("content", []):
            text = c.get("text", "")
            try:  # FastMCP renders a list result as one JSON array of strings
                decoded = json.loads(text)
                found.extend(decoded if isinstance(decoded, list) else [text])
            except ValueError:
                found.append(text)
        return any(documents.get(q.target_id, "\0") in f for f in found)

    return Target(name="mcp-server-qdrant", argv=argv, env=env, tool="qdrant-find",
                  arguments=lambda q: {"query": q}, hit=hit, stderr=stderr)


def hit_by_text_prefix(texts: dict[str, str]) -> Callable[[dict, Query], bool]:
    """A hit test for stores from `astra-mcp-dev bench populate`, whose rows carry the generated text itself
    or that text plus a ` (#i)` suffix (their ids are the store's own): the target's text begins a
    result's text (`texts`: query target id -> generated text)."""
    def hit(result: dict, q: Query) -> bool:
        """Whether a result is the target text or one of its copies."""
        want = texts.get(q.target_id)
        return bool(want) and any(r["text"] == want or r["text"].startswith(want + " (#")
                                  for r in result["structuredContent"]["results"])
    return hit
