"""astra-mcp performance benchmarks (issue 7): cold start, warm search at several store sizes, resident
memory, embedding throughput, bulk ingest, and mcp-server-qdrant side by side on the same model file.
Run through `bench/run`, which prepares the Python environment; `bench/run --help` lists the options.

Results go to `--out` (default bench/results/) as `<time>.json` and `<time>.md`; the Markdown table is
also printed on stdout, progress on stderr. Every store lives in a temp dir made for the run and removed
at the end (`--keep` leaves them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import dataset
import report
import scenarios
import stores
from common import (BENCH_DIR, CACHE_DIR, MODEL_DIR, machine_facts, make_temp_dir, percentile, remove_temp_dir,
                    summarize)
from embedder import OnnxEmbedder, query_latency_ms, throughput

SECTIONS = ("embed", "ingest", "cold", "warm", "single", "sequential")


def log(msg: str) -> None:
    """Progress on stderr (stdout carries the report)."""
    print(msg, file=sys.stderr, flush=True)


def default_binary() -> str:
    """$ASTRA_MCP_BIN, else the release build in the project's target dir, else `astra-mcp` on PATH."""
    if os.environ.get("ASTRA_MCP_BIN"):
        return os.environ["ASTRA_MCP_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR") or CACHE_DIR / "target") / "release" / "astra-mcp"
    return str(target) if target.exists() else (shutil.which("astra-mcp") or str(target))


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (every size and repetition count is an option)."""
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=default_binary(), help="astra-mcp binary (default: %(default)s)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run, of {', '.join(SECTIONS)} (default: all)")
    ap.add_argument("--sizes", type=ints, default=[1000, 10000],
                    help="stored memories per table for warm search, e.g. 1000,10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200, help="timed searches per size and tool")
    ap.add_argument("--warmup", type=int, default=10, help="untimed searches before them")
    ap.add_argument("--top-k", type=int, default=10, help="top_k of every search (mcp-server-qdrant returns 10)")
    ap.add_argument("--idle-wait", type=float, default=3.0,
                    help="seconds between initialize and the idle RSS reading (the model loads meanwhile)")
    ap.add_argument("--cold-runs", type=int, default=10, help="cold starts per server")
    ap.add_argument("--cold-size", type=int, default=1000, help="fixes in the store the cold starts search")
    ap.add_argument("--embed-texts", type=int, default=256, help="texts per embedding-throughput pass")
    ap.add_argument("--batch-sizes", type=ints, default=[1, 8, 32, 64], help="embedding batch sizes")
    ap.add_argument("--embed-repeats", type=int, default=3,
                    help="passes per batch size, each side (astra-mcp-dev bench embed and Python), interleaved")
    ap.add_argument("--embed-threads", type=int, default=0, help="onnxruntime intra-op threads (0 = its default)")
    ap.add_argument("--ingest-rows", type=int, default=2000,
                    help="archival passages of the bulk-ingest comparison (`memory ingest` vs `bench embed`)")
    ap.add_argument("--populate-texts", type=int, default=10000,
                    help="distinct passage texts `bench populate` embeds for the sizes above --real-max")
    ap.add_argument("--recall-queries", type=int, default=200,
                    help="queries of `astra-mcp-dev bench recall` (recall@10 indexed vs exact) at each size")
    ap.add_argument("--single-inserts", type=int, default=0,
                    help="passages stored one `archival_memory_insert` at a time for the disk/upkeep comparison "
                         "(0 = skip; the issue's figure is 10000)")
    ap.add_argument("--sequential-inserts", type=int, default=500,
                    help="passages stored one call at a time by each server in the side-by-side insert section "
                         "(archival_memory_insert against qdrant-store, alternating in blocks of 25)")
    ap.add_argument("--vectors", choices=("auto", "real", "synthetic"), default="auto",
                    help="store vectors: real embeddings, synthetic unit vectors, or real up to --real-max")
    ap.add_argument("--real-max", type=int, default=10000,
                    help="sizes up to this are loaded by `memory import` (fixes and passages, real vectors); "
                         "larger sizes by `astra-mcp-dev bench populate` (archival passages only)")
    ap.add_argument("--part-rows", type=int, default=20000, help="rows per `memory import` file")
    ap.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure mcp-server-qdrant (default: on)")
    ap.add_argument("--peer-max", type=int, default=10000,
                    help="largest store size loaded into mcp-server-qdrant (embedded Qdrant is brute force)")
    ap.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                    help="also time both astra-mcp searches on an empty store: the query's embedding plus the "
                         "fixed cost of a call, measured inside the server (default: on)")
    ap.add_argument("--seed", type=int, default=1, help="dataset seed")
    ap.add_argument("--label", default="", help="a note printed above the results, e.g. 'trial, busy machine'")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="results folder (default: bench/results)")
    ap.add_argument("--keep", action="store_true", help="keep the temp stores (their paths are printed)")
    args = ap.parse_args(argv)
    args.only = [s for s in args.only.split(",") if s]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    if args.queries < 1 or args.cold_runs < 1:
        ap.error("--queries and --cold-runs must be at least 1")
    return args


def versions(binary: str) -> dict:
    """The binary's version and size, and the pinned Python packages the run used."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    pkgs = {}
    for name in ("onnxruntime", "tokenizers", "numpy", "mcp-server-qdrant", "qdrant-client", "fastembed", "mcp"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    return {"astra_mcp": out.stdout.strip(), "astra_mcp_binary": binary,
            "astra_mcp_binary_mib": round(os.path.getsize(binary) / 2**20, 1), "python_packages": pkgs}


class Embedders:
    """One lazily loaded harness embedder, shared by every section."""

    def __init__(self, threads: int):
        """`threads`: onnxruntime intra-op threads (0 = its default)."""
        self.threads = threads
        self._e = None

    def get(self) -> OnnxEmbedder:
        """The embedder, loaded on first use."""
        if self._e is None:
            self._e = OnnxEmbedder(MODEL_DIR, self.threads)
        return self._e

    def fresh(self) -> OnnxEmbedder:
        """A new embedder with a new session (not shared)."""
        return OnnxEmbedder(MODEL_DIR, self.threads)


def _rates(values: list[float]) -> dict:
    """Median, min and max of texts/s figures."""
    v = sorted(values)
    return {"median": round(v[len(v) // 2], 1) if len(v) % 2 else round((v[len(v) // 2 - 1] + v[len(v) // 2]) / 2, 1),
            "min": round(v[0], 1), "max": round(v[-1], 1), "n": len(v)}


def run_embed(args, emb: Embedders, work: Path) -> dict:
    """Embedding throughput of the binary (`astra-mcp-dev bench embed --one-batch`: each call one ONNX batch)
    and of Python onnxruntime on the same `model.onnx`, the same texts (generated fix and passage texts,
    on one line each) and the same batch sizes, in generated order, plus the largest batch on the texts
    sorted by length. The two sides alternate pass by pass (binary, Python, binary, ...), so a busy
    moment hits both, and both start each pass from a fresh session: the binary is a new process for the
    sizes in generated order and another for the sorted texts, and Python loads a new `InferenceSession`
    for each (a session kept across passes, or used for larger batches before, runs warm).
    Beside them, the binary's own batching (`bench embed` without `--one-batch`: length order, ONNX
    batches of 8) on calls of the largest size: what `memory ingest` and the server get."""
    texts = [dataset.one_line(t) for t in dataset.embedding_texts(args.seed, args.embed_texts)]
    path = stores.write_lines(work / "embed-texts.txt", texts)
    largest = [b for b in args.batch_sizes if b > 1][-1:]
    configs = [(b, False) for b in args.batch_sizes] + [(b, True) for b in largest]
    log(f"embedding throughput: {len(texts)} texts, batches {args.batch_sizes} (+{largest} sorted), "
        f"{args.embed_repeats} passes per side, a fresh session each")
    astra = {c: [] for c in configs}
    own = {c: [] for c in configs if c[0] in largest}
    python = {c: [] for c in configs}
    for rep in range(args.embed_repeats):
        for r in stores.bench_embed(args.binary, path, args.batch_sizes, one_batch=True):
            astra[(r["batch"], False)].append(r["texts_per_second"])
        if largest:
            for r in stores.bench_embed(args.binary, path, largest, sort_by_length=True, one_batch=True):
                astra[(r["batch"], True)].append(r["texts_per_second"])
            for srt in (False, True):
                for r in stores.bench_embed(args.binary, path, largest, sort_by_length=srt):
                    own[(r["batch"], srt)].append(r["texts_per_second"])
        # as the binary: one session for the sizes in generated order, a new one for the sorted texts
        for group in (False, True):
            fresh = emb.fresh()
            for b, srt in configs:
                if srt == group:
                    python[(b, srt)].append(
                        throughput(fresh, texts, [b], 1, sort_by_length=srt)[0]["texts_per_s_median"])
            del fresh
        log(f"  pass {rep + 1}: " + ", ".join(
            f"b{b}{'s' if srt else ''} astra {astra[(b, srt)][-1]:.1f} / python {python[(b, srt)][-1]:.1f}"
            for b, srt in configs) + "; own batching " + ", ".join(
            f"b{b}{'s' if srt else ''} {own[(b, srt)][-1]:.1f}" for b, srt in own))
    rows = []
    for b, srt in configs:
        a, py = _rates(astra[(b, srt)]), _rates(python[(b, srt)])
        rows.append({"batch": b, "sorted_by_length": srt, "texts": len(texts), "astra_texts_per_s": a,
                     "python_texts_per_s": py, "ratio_astra_over_python": round(a["median"] / py["median"], 2)})
    own_rows = []
    for (b, srt), values in own.items():
        a, py = _rates(values), _rates(python[(b, srt)])
        own_rows.append({"batch": b, "sorted_by_length": srt, "texts": len(texts), "astra_texts_per_s": a,
                         "python_texts_per_s": py, "ratio_astra_over_python": round(a["median"] / py["median"], 2)})
    return {"rows": rows, "own_batching_rows": own_rows, "fresh_session_per_pass": True,
            "text_chars_median": sorted(len(t) for t in texts)[len(texts) // 2],
            "ort_python": emb.get().ort_version}


def run_ingest(args, emb: Embedders, work: Path) -> dict:
    """Bulk ingest: `--ingest-rows` generated archival passages (with their tags) through `astra-mcp memory
    ingest` into a fresh store, against the binary's own embedding rate on the same texts
    (`bench embed --sort-by-length --batch 64`, what ingest does: length-sorted batches of 64). The
    embedder runs just before and just after the ingest; the ratio uses their mean."""
    passages = stores.rows("passage", args.seed, 0, args.ingest_rows)
    texts = [p.text for p in passages]
    log(f"ingest: {len(texts)} passages, `memory ingest` vs `bench embed --sort-by-length --batch 64`")
    path = stores.write_lines(work / "ingest-texts.txt", texts)
    jsonl = work / "ingest.jsonl"
    jsonl.write_text("".join(json.dumps({"text": p.text, "tags": p.tags}) + "\n" for p in passages))
    before = stores.bench_embed(args.binary, path, [64], sort_by_length=True)[0]["texts_per_second"]
    ing = stores.memory_ingest(args.binary, work / "ingest-db", jsonl, "local", "bench")
    after = stores.bench_embed(args.binary, path, [64], sort_by_length=True)[0]["texts_per_second"]
    embed_rate = (before + after) / 2
    log(f"  ingest {ing['passages_per_s']} passages/s; embedder {before:.1f} / {after:.1f} texts/s")
    return {"passages": len(texts), "text_chars_median": sorted(map(len, texts))[len(texts) // 2],
            "ingest": ing, "embed_sorted_b64_before": round(before, 1), "embed_sorted_b64_after": round(after, 1),
            "ratio_ingest_over_embed": round(ing["passages_per_s"] / embed_rate, 3),
            "ratio_ingest_wall_over_embed": round(ing["ingested"] / ing["wall_s"] / embed_rate, 3),
            "disk": stores.store_disk(work / "ingest-db", sum(2 * len(t.encode()) + 384 * 4 for t in texts))}


def run_cold(args, header: dict, emb: Embedders, work: Path, version: str) -> dict:
    """Cold starts against a store of `--cold-size` fixes (and the same texts in Qdrant)."""
    log(f"cold start: store of {args.cold_size} fixes, {args.cold_runs} runs per server")
    db = work / "cold-db"
    load = stores.grow_astra_store(args.binary, db, header, "fix", 0, args.cold_size, seed=args.seed, actor="local",
                                   vector_mode=args.vectors, real_max=args.real_max, part_rows=args.part_rows,
                                   embedder_factory=emb.get, workdir=work, log=log)
    targets = [scenarios.astra_fix_target(args.binary, db, args.top_k, work / "astra-cold.stderr")]
    if args.peer:
        targets.append(peer_target(args, work, "cold", args.cold_size, emb))
    queries = dataset.fix_queries(args.seed, min(args.cold_size, real_limit(args)), args.cold_runs, salt="cold")
    return {"store_fixes": args.cold_size, "load": load,
            "servers": scenarios.cold_start(targets, version, args.cold_runs, queries, log=log)}


def real_limit(args) -> int:
    """Rows with real vectors: queries target only those, so the vector ranking can find them."""
    return {"real": 1 << 62, "synthetic": 1 << 62}.get(args.vectors, args.real_max)


_peer_loaded: dict[str, int] = {}


def peer_target(args, work: Path, name: str, size: int, emb: Embedders) -> scenarios.Target:
    """mcp-server-qdrant over an embedded-Qdrant folder `work/qdrant-<name>` grown to `size` fixes
    (the texts astra-mcp embeds, the same vectors)."""
    data = work / f"qdrant-{name}"
    have = _peer_loaded.get(name, 0)
    fixes = stores.rows("fix", args.seed, 0, size)
    docs = [r.embedded_text for r in fixes]
    if size > have:
        vecs = stores.vectors("fix", args.seed, 0, size, args.vectors, args.real_max, emb.get, log)
        secs = stores.grow_qdrant_store(data, docs, vecs, have)
        log(f"  qdrant: {size} points loaded ({secs:.1f} s)")
        _peer_loaded[name] = size
    cache = stores.fastembed_cache(work / "fastembed")
    return scenarios.qdrant_target(stores.qdrant_argv(), stores.qdrant_env(cache, data),
                                   {r.id: r.embedded_text for r in fixes}, work / f"qdrant-{name}.stderr")


def query_embed_ms(args, work: Path, name: str, texts: list[str]) -> dict:
    """The query's own embedding time, estimated with the binary itself: `astra-mcp-dev bench embed --batch 1`
    over the timed query texts gives texts/s, i.e. mean ms per query (embed_documents of one text; the
    server's embed_query runs the same model on one text). An estimate from another process, not the
    search's own time."""
    path = stores.write_lines(work / f"queries-{name}.txt", [dataset.one_line(t).strip() for t in texts])
    rate = stores.bench_embed(args.binary, path, [1])[0]["texts_per_second"]
    return {"texts_per_s": round(rate, 1), "ms_per_query": round(1000 / rate, 2), "queries": len(texts)}


def recall_at(args, work: Path, db: Path, name: str, queries: list) -> dict:
    """`astra-mcp-dev bench recall --k 10` on the archival table of `db` for the first `--recall-queries`
    query texts (indexed vs exact vector search, store only, embedding excluded)."""
    texts = [dataset.one_line(q.text).strip() for q in queries][: args.recall_queries]
    path = stores.write_lines(work / f"recall-{name}.txt", texts)
    r = stores.bench_recall(args.binary, db, path, "local", args.top_k)
    log(f"  recall@{r['k']} {r['recall']:.3f} (indexed: {r['indexed']}); store-only p50 indexed "
        f"{r['indexed_p50_ms']:.2f} ms, exact {r['exact_p50_ms']:.2f} ms")
    return r


def run_warm(args, header: dict, emb: Embedders, work: Path, version: str, out: list, save) -> list[dict]:
    """For each size up to `--real-max` (ascending, the store grows in place): load fixes and passages to
    that size with `memory import` (real vectors), then warm-search both tools on astra-mcp, and
    qdrant-find on mcp-server-qdrant up to `--peer-max`; recall@10 of the archival index. Each larger
    size: a fresh store of that many archival passages from `astra-mcp-dev bench populate`, warm
    archival_memory_search and recall@10 on it (then the store is deleted, unless --keep)."""
    db = work / "warm-db"
    have = 0
    raw = 0
    if args.floor:
        out.append(run_floor(args, work, version))
        save()
    n = args.queries + args.warmup
    for size in sorted(s for s in args.sizes if s <= args.real_max):
        log(f"warm search at {size} memories per table")
        fix_load = stores.grow_astra_store(args.binary, db, header, "fix", have, size, seed=args.seed, actor="local",
                                           vector_mode=args.vectors, real_max=args.real_max,
                                           part_rows=args.part_rows, embedder_factory=emb.get, workdir=work, log=log)
        passage_load = stores.grow_astra_store(args.binary, db, header, "passage", have, size, seed=args.seed,
                                               actor="local", vector_mode=args.vectors, real_max=args.real_max,
                                               part_rows=args.part_rows, embedder_factory=emb.get, workdir=work,
                                               log=log)
        raw += fix_load["raw_bytes_added"] + passage_load["raw_bytes_added"]
        have = size
        pool = min(size, real_limit(args))
        fix_q = dataset.fix_queries(args.seed, pool, n, salt="warm")
        passage_q = dataset.archival_queries(args.seed, pool, n, salt="warm")
        row = {"size": size, "load_path": "memory import", "load": {"fixes": fix_load, "archival": passage_load},
               "disk": stores.store_disk(db, raw)}
        row["astra_fix"] = scenarios.warm_search(
            scenarios.astra_fix_target(args.binary, db, args.top_k, work / "astra-warm.stderr"),
            version, fix_q, args.warmup, args.idle_wait)
        log(f"  search_codebase_memory p50 {row['astra_fix']['latency_ms']['median']} ms")
        row["astra_archival"] = scenarios.warm_search(
            scenarios.astra_archival_target(args.binary, db, args.top_k, work / "astra-warm.stderr"),
            version, passage_q, args.warmup, args.idle_wait)
        log(f"  archival_memory_search p50 {row['astra_archival']['latency_ms']['median']} ms")
        if args.peer and size <= args.peer_max:
            row["qdrant_find"] = scenarios.warm_search(peer_target(args, work, "warm", size, emb), version, fix_q,
                                                       args.warmup, args.idle_wait)
            log(f"  qdrant-find p50 {row['qdrant_find']['latency_ms']['median']} ms")
        row["recall"] = recall_at(args, work, db, f"{size}", passage_q[args.warmup:])
        row["query_embed_ms"] = {
            "fix": query_embed_ms(args, work, "fix", [q.text for q in fix_q[args.warmup:]]),
            "archival": query_embed_ms(args, work, "archival", [q.text for q in passage_q[args.warmup:]]),
        }
        # the same, embedded by this process's onnxruntime (for comparison with the binary's figure)
        row["query_embed_estimate_ms"] = {
            "fix": summarize(query_latency_ms(emb.get(), [q.text for q in fix_q[args.warmup:]]), 2),
            "archival": summarize(query_latency_ms(emb.get(), [q.text for q in passage_q[args.warmup:]]), 2),
        }
        out.append(row)
        save()
    large = sorted(s for s in args.sizes if s > args.real_max)
    if large:
        texts = [p.text for p in stores.rows("passage", args.seed, 0, args.populate_texts)]
        texts_file = stores.write_lines(work / "populate-texts.txt", texts)
    for size in large:
        out.append(run_large(args, work, version, size, texts, texts_file))
        save()
    return out


def run_large(args, work: Path, version: str, size: int, texts: list[str], texts_file: Path) -> dict:
    """One size above `--real-max`: `astra-mcp-dev bench populate --rows SIZE` over `--populate-texts` distinct
    passage texts into a fresh store, then warm archival_memory_search over stdio, recall@10 and the
    query-embedding estimate. Queries are written from the distinct texts (questions and prefixes); a
    query finds its target when a result is that text or one of its `(#i)` copies."""
    db = work / f"populate-{size}"
    log(f"warm search at {size} archival passages (bench populate, {len(texts)} distinct texts)")
    load = stores.bench_populate(args.binary, db, texts_file, size, args.seed, "local", "bench")
    log(f"  populated in {load['wall_s']} s: write {load['write_seconds']:.1f} s, full-text index "
        f"{load['fts_index_seconds']:.1f} s, vector index {load['vector_index_seconds']:.1f} s, upkeep (compaction) "
        f"{load.get('optimize_seconds', 0):.1f} s")
    raw = sum((2 * (len(texts[i % len(texts)].encode()) + len(f" (#{i})")) + 384 * 4) for i in range(size))
    row = {"size": size, "load_path": "bench populate", "populate": load, "disk": stores.store_disk(db, raw),
           "stats": stores.stats(args.binary, db)}
    pool = min(size, len(texts))
    queries = dataset.archival_queries(args.seed, pool, args.queries + args.warmup, salt="warm")
    target = scenarios.astra_archival_target(args.binary, db, args.top_k, work / "astra-warm.stderr")
    target.hit = scenarios.hit_by_text_prefix({q.target_id: texts[q.target_index] for q in queries})
    row["astra_archival"] = scenarios.warm_search(target, version, queries, args.warmup, args.idle_wait)
    log(f"  archival_memory_search p50 {row['astra_archival']['latency_ms']['median']} ms, "
        f"RSS after {row['astra_archival']['rss_after_searches_mib']} MiB")
    row["recall"] = recall_at(args, work, db, f"{size}", queries[args.warmup:])
    row["query_embed_ms"] = {"archival": query_embed_ms(args, work, "archival", [q.text for q in queries[args.warmup:]])}
    if not args.keep:
        import shutil as _sh
        _sh.rmtree(db, ignore_errors=True)
    return row


def run_floor(args, work: Path, version: str) -> dict:
    """Both astra-mcp searches on an empty store (size 0): what a call costs with nothing to rank, i.e.
    the query's embedding plus the protocol and the empty table lookups, measured in the server."""
    log("warm search on an empty store (the floor: embedding + fixed cost)")
    db = work / "empty-db"
    n = args.queries + args.warmup
    row = {"size": 0}
    for key, make, queries in (
            ("astra_fix", scenarios.astra_fix_target, dataset.fix_queries(args.seed, 1000, n, salt="warm")),
            ("astra_archival", scenarios.astra_archival_target, dataset.archival_queries(args.seed, 1000, n, salt="warm"))):
        row[key] = scenarios.warm_search(make(args.binary, db, args.top_k, work / "astra-floor.stderr"), version,
                                         queries, args.warmup, args.idle_wait)
        row[key]["target_found_rate"] = None
        log(f"  {key} p50 {row[key]['latency_ms']['median']} ms on an empty store")
    return row


def run_single(args, header: dict, emb: Embedders, work: Path, version: str) -> dict:
    """`--single-inserts` passages stored one tool call at a time (each embedded by the server, with its
    near-duplicate check; each call is also recorded as a conversation item), then `memory optimize
    --prune-older-than 0` with no server running (the upkeep, without the 60 s grace the server keeps for
    concurrent readers); disk against the raw rows, and warm archival search on that store next to a
    store bulk-loaded with the same rows."""
    n = args.single_inserts
    log(f"single inserts: {n} archival_memory_insert calls")
    db = work / "single-db"
    server = scenarios.astra_archival_target(args.binary, db, args.top_k, work / "astra-single.stderr").spawn()
    passages = stores.rows("passage", args.seed, 0, n)
    raw = sum(2 * len(p.text.encode()) + 384 * 4 for p in passages)
    try:
        server.initialize(version)
        t0 = time.perf_counter()
        for i, p in enumerate(passages, 1):
            server.call_tool("archival_memory_insert", {"text": p.text, "tags": p.tags})
            if i % 500 == 0:
                log(f"  {i}/{n} inserted ({i / (time.perf_counter() - t0):.1f}/s)")
        insert_s = time.perf_counter() - t0
    finally:
        server.stop()
    before = stores.store_disk(db, raw)
    optimize_s = stores.run_optimize(args.binary, db, prune_older_than=0)
    after = stores.store_disk(db, raw)
    bulk_db = work / "single-bulk-db"
    bulk = stores.grow_astra_store(args.binary, bulk_db, header, "passage", 0, n, seed=args.seed, actor="local",
                                   vector_mode="real", real_max=n, part_rows=args.part_rows,
                                   embedder_factory=emb.get, workdir=work, log=log)
    queries = dataset.archival_queries(args.seed, n, args.queries + args.warmup, salt="single")
    search = {}
    for name, store in (("single_inserts", db), ("bulk_loaded", bulk_db)):
        target = scenarios.astra_archival_target(args.binary, store, args.top_k, work / "astra-single.stderr")
        # the server gives inserted passages ids of its own: a hit is the target's text
        target.hit = scenarios.hit_by_text_prefix({q.target_id: passages[q.target_index].text for q in queries})
        search[name] = scenarios.warm_search(target, version, queries, args.warmup, args.idle_wait)
    return {"inserts": n, "insert_s": round(insert_s, 1), "inserts_per_s": round(n / insert_s, 1),
            "disk_before_optimize": before, "optimize_s": round(optimize_s, 2), "disk_after_optimize": after,
            "bulk_disk": stores.store_disk(bulk_db, bulk["raw_bytes_added"]), "search": search,
            "stats_after_optimize": stores.stats(args.binary, db), "bulk_stats": stores.stats(args.binary, bulk_db)}


def run_sequential(args, work: Path, version: str) -> dict:
    """`--sequential-inserts` passages stored one call at a time, side by side: astra-mcp's
    `archival_memory_insert` on a fresh store and mcp-server-qdrant's `qdrant-store` on a fresh embedded
    Qdrant, both servers running at once and taking turns in blocks of 25 calls, so both see the same
    machine. Each call embeds its text; astra-mcp's also checks near-duplicates and records the call as a
    conversation item. Then astra-mcp's search while writes go on: a second `serve` process on the same
    store runs `archival_memory_search` in a loop while the first stores `--sequential-inserts / 2` more
    passages, against the same searches with no writer."""
    import threading

    n = args.sequential_inserts
    log(f"sequential inserts: {n} archival_memory_insert and {n} qdrant-store calls, alternating")
    passages = stores.rows("passage", args.seed, 0, n + n // 2)
    db = work / "sequential-db"
    astra = scenarios.astra_archival_target(args.binary, db, args.top_k, work / "astra-sequential.stderr").spawn()
    cache = stores.fastembed_cache(work / "fastembed")
    qdrant = scenarios.qdrant_target(stores.qdrant_argv(), stores.qdrant_env(cache, work / "qdrant-sequential"), {},
                                     work / "qdrant-sequential.stderr").spawn()
    latency: dict[str, list[float]] = {"astra": [], "qdrant": []}
    wall = {"astra": 0.0, "qdrant": 0.0}
    calls = {"astra": (astra, "archival_memory_insert", lambda p: {"text": p.text, "tags": p.tags}),
             "qdrant": (qdrant, "qdrant-store", lambda p: {"information": p.text})}
    try:
        astra.initialize(version)
        qdrant.initialize(version)
        for start in range(0, n, 25):
            for name, (server, tool, arguments) in calls.items():
                t_block = time.perf_counter()
                for p in passages[start:start + 25]:
                    t0 = time.perf_counter()
                    server.call_tool(tool, arguments(p))
                    latency[name].append((time.perf_counter() - t0) * 1000)
                wall[name] += time.perf_counter() - t_block
        qdrant.stop()

        queries = dataset.archival_queries(args.seed, n, 200, salt="sequential")
        reader = scenarios.astra_archival_target(args.binary, db, args.top_k, work / "astra-sequential-reader.stderr")
        searcher = reader.spawn()
        searcher.initialize(version)

        def search_all() -> list[float]:
            out = []
            for q in queries:
                t0 = time.perf_counter()
                searcher.call_tool(reader.tool, reader.arguments(q.text))
                out.append((time.perf_counter() - t0) * 1000)
            return out

        search_all()  # warm: model loaded, indexes and files read once
        quiet = search_all()
        writing = threading.Event()
        writing.set()

        def write_more() -> None:
            for p in passages[n:]:
                astra.call_tool("archival_memory_insert", {"text": p.text, "tags": p.tags})
            writing.clear()

        writer = threading.Thread(target=write_more)
        writer.start()
        busy: list[float] = []
        while writing.is_set():
            busy.extend(search_all())
        writer.join()
        searcher.stop()
    finally:
        astra.stop()
        qdrant.stop()
    rates = {name: round(n / wall[name], 1) for name in wall}
    return {
        "inserts_each": n,
        "inserts_per_s": rates,
        "astra_over_qdrant": round(rates["astra"] / rates["qdrant"], 2),
        "insert_latency_ms": {name: summarize(v, 1) for name, v in latency.items()},
        "search_ms_no_writes": summarize(quiet, 1),
        "search_ms_during_writes": summarize(busy, 1),
        "search_p99_over_p50_during_writes": round(percentile(busy, 99) / percentile(busy, 50), 2),
    }


def main(argv: list[str]) -> int:
    """Runs the chosen sections and writes the results."""
    args = parse_args(argv)
    if not os.access(args.binary, os.X_OK):
        log(f"bench: no astra-mcp binary at {args.binary}: build it (cargo build --release --all-targets) or pass --binary")
        return 2
    facts = machine_facts()
    log("machine: " + json.dumps(facts))
    results = {"label": args.label, "machine": facts, "versions": versions(args.binary),
               "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    work = make_temp_dir("run")
    log(f"temp dir: {work}")
    emb = Embedders(args.embed_threads)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    started = time.perf_counter()

    def save() -> None:
        """Writes what is measured so far (after every section and every warm size), so an interrupted
        run keeps its figures."""
        results["elapsed_s"] = round(time.perf_counter() - started, 1)
        (args.out / f"{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")

    errors = results.setdefault("errors", {})
    try:
        header = stores.export_header(args.binary, work)
        results["export_header"] = header
        version = scenarios.negotiated_version([args.binary, "serve", "--stdio", "--db", str(work / "header-db")])
        results["protocol_version"] = version
        sections = [
            ("embed", "embedding", lambda: run_embed(args, emb, work), True),
            ("ingest", "ingest", lambda: run_ingest(args, emb, work), args.ingest_rows > 0),
            ("cold", "cold_start", lambda: run_cold(args, header, emb, work, version), True),
            ("warm", "warm", lambda: run_warm(args, header, emb, work, version, results.setdefault("warm", []), save),
             True),
            ("single", "single_inserts", lambda: run_single(args, header, emb, work, version), args.single_inserts > 0),
            ("sequential", "sequential_inserts", lambda: run_sequential(args, work, version),
             args.sequential_inserts > 0),
        ]
        for name, key, run, wanted in sections:
            if name not in args.only or not wanted:
                continue
            t0 = time.perf_counter()
            try:
                value = run()
                if key != "warm":
                    results[key] = value
            except Exception as e:  # noqa: BLE001 - one failed section must not lose the others
                import traceback
                errors[name] = f"{type(e).__name__}: {e}"
                log(f"section {name} FAILED: {e}\n{traceback.format_exc()}")
            results.setdefault("section_seconds", {})[name] = round(time.perf_counter() - t0, 1)
            log(f"section {name}: {results['section_seconds'][name]} s")
            save()
        results["machine_after"] = {"load_average_1_5_15": machine_facts()["load_average_1_5_15"]}
    finally:
        if args.keep:
            log(f"kept: {work}")
        else:
            remove_temp_dir(work)
        save()
    markdown = report.render(results)
    (args.out / f"{stamp}.md").write_text(markdown)
    print(markdown)
    log(f"results: {args.out / (stamp + '.json')} and .md")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
