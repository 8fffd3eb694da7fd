"""A/B of warm search over stdio: variants (an astra-mcp binary, a store, extra environment) searched in
interleaved rounds (A, B, C, then C, B, A, ...) with the same queries per round, so a busy moment hits
every variant. Each round is `scenarios.warm_search`: one server process, `--warmup` untimed searches,
then `--queries` timed ones; the server's own per-search timings come from its debug log. Prints one
JSON line per round and variant, then the median over rounds of each figure per variant, and writes
both to `--out` as JSON.

Stores are not built here: keep one from `bench/run --keep` (its path is printed), e.g.

    bench/run --only warm --sizes 1000000 --no-peer --no-floor --keep
    bench/run ab --store /tmp/astra-bench-run-XXXX/populate-1000000 --rounds 4 \\
        --variant base=/tmp/astra-old --variant new=target/release/astra-mcp

A variant is NAME=BINARY, optionally NAME=BINARY@STORE (another store than --store, e.g. a compacted
copy). Queries are archival_memory_search queries of the seeded dataset (`dataset.archival_queries`);
`--tool fixes` searches search_codebase_memory on a `bench/run` warm-db instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dataset
import scenarios
import stores
from common import machine_facts

FIELDS = ("embed_ms", "keyword_ms", "vector_ms", "rows_ms", "total_ms")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(prog="bench/run ab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="the store every variant searches by default")
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=BINARY[@STORE]",
                    help="one variant (repeat for each)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME:KEY=VALUE",
                    help="an environment variable for one variant's server")
    ap.add_argument("--tool", choices=("archival", "fixes"), default="archival")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--queries", type=int, default=100, help="timed searches per round and variant")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pool", type=int, default=10000,
                    help="rows of the dataset the queries are written from (bench populate's distinct texts)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--idle-wait", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    args.variants = []
    for v in args.variant:
        name, _, rest = v.partition("=")
        binary, _, store = rest.partition("@")
        if not name or not binary:
            ap.error(f"--variant {v!r}: want NAME=BINARY[@STORE]")
        args.variants.append({"name": name, "binary": binary, "store": store or str(args.store), "env": {}})
    by_name = {v["name"]: v for v in args.variants}
    for e in args.env:
        name, _, kv = e.partition(":")
        key, _, value = kv.partition("=")
        if name not in by_name or not key:
            ap.error(f"--env {e!r}: want NAME:KEY=VALUE for a variant's NAME")
        by_name[name]["env"][key] = value
    return args


def one_round(args, variant: dict, queries: list, texts: list[str]) -> dict:
    """One warm-search process of `variant`: latency, the server's stage timings and RSS."""
    stderr = args.logs / f"{variant['name']}.stderr"
    if args.tool == "archival":
        target = scenarios.astra_archival_target(variant["binary"], Path(variant["store"]), 10, stderr)
        target.hit = scenarios.hit_by_text_prefix({q.target_id: texts[q.target_index] for q in queries})
    else:
        target = scenarios.astra_fix_target(variant["binary"], Path(variant["store"]), 10, stderr)
    target.env = {**os.environ, **variant["env"]}
    out = scenarios.warm_search(target, variant["version"], queries, args.warmup, args.idle_wait)
    stages = out.get("server_stages_ms", {})
    return {
        "p50_ms": out["latency_ms"]["median"], "p99_ms": out["latency_ms"]["p99"],
        "rest_p50_ms": stages.get("rest_ms", {}).get("median"),
        **{k: stages[k]["median"] for k in FIELDS if k in stages},
        "target_found_rate": out["target_found_rate"], "rss_after_searches_mib": out["rss_after_searches_mib"],
    }


def main(argv: list[str]) -> int:
    """Runs the rounds and prints the medians."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.logs = Path(tempfile.mkdtemp(prefix="astra-bench-ab-"))  # the servers' debug logs
    facts = machine_facts()
    print("machine: " + json.dumps(facts), file=sys.stderr)
    texts = [p.text for p in stores.rows("passage", args.seed, 0, args.pool)]
    make = dataset.archival_queries if args.tool == "archival" else dataset.fix_queries
    for v in args.variants:  # the protocol version each binary answers, as bench/run speaks it
        v["version"] = scenarios.negotiated_version([v["binary"], "serve", "--stdio", "--db", v["store"]])
    rounds: dict[str, list[dict]] = {v["name"]: [] for v in args.variants}
    for r in range(args.rounds):
        queries = make(args.seed, args.pool, args.queries + args.warmup, salt=f"ab{r}")
        for v in (args.variants if r % 2 == 0 else args.variants[::-1]):
            row = one_round(args, v, queries, texts)
            rounds[v["name"]].append(row)
            print(json.dumps({"round": r, "variant": v["name"], **row}), flush=True)
    medians = {}
    for name, rows in rounds.items():
        medians[name] = {k: round(statistics.median(x[k] for x in rows), 2)
                         for k in rows[0] if all(x.get(k) is not None for x in rows)}
        print(f"median over {args.rounds} rounds, {name}: {json.dumps(medians[name])}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (args.out / f"ab-{stamp}.json").write_text(json.dumps(
        {"machine": facts, "machine_after": {"load_average_1_5_15": machine_facts()["load_average_1_5_15"]},
         "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
         "rounds": rounds, "medians": medians}, indent=2) + "\n")
    print(f"results: {args.out / ('ab-' + stamp + '.json')}; server logs: {args.logs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
