"""Building the stores the benchmarks search: an astra-mcp LanceDB directory bulk-loaded through
`astra-mcp memory import` (the binary's fastest load path: JSONL rows that carry their vectors), and an
embedded-Qdrant folder for mcp-server-qdrant with the same texts and the same vectors, plus the offline
fastembed cache that lets mcp-server-qdrant load astra-mcp's model file.

Vectors are real (this harness's onnxruntime embedder on the same model file; identical to the server's
to float precision) or synthetic unit vectors for sizes where embedding every text would take hours
(`--vectors auto` embeds the first `--real-max` rows and makes up the rest). Real vectors are cached under
`<cache>/bench-cache/` so a rerun does not embed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import dataset
from common import dev_binary
from common import BENCH_CACHE, MODEL_DIR, StdioServer, dir_bytes

QDRANT_VECTOR_NAME = "fast-all-minilm-l6-v2"  # what mcp-server-qdrant 0.8.1 names the vector of this model
QDRANT_HF_REPO = "models--Qdrant--all-MiniLM-L6-v2-onnx"
QDRANT_MODEL_FILES = ("model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json",
                      "tokenizer_config.json")


# ---------------------------------------------------------------------------------------------------------
# rows and vectors


def rows(kind: str, seed: int, start: int, stop: int) -> list:
    """Rows `start..stop` of the dataset (`kind` = "fix" or "passage")."""
    make = dataset.fix_row if kind == "fix" else dataset.passage_row
    return [make(seed, i) for i in range(start, stop)]


def _model_tag() -> str:
    """A short hash of model.onnx, so cached vectors are never reused across models."""
    h = hashlib.sha256()
    with open(MODEL_DIR / "model.onnx", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def real_vectors(kind: str, seed: int, count: int, embedder_factory, log=print) -> np.ndarray:
    """Real vectors of the first `count` rows, embedded once and cached (the cache grows as needed)."""
    BENCH_CACHE.mkdir(parents=True, exist_ok=True)
    path = BENCH_CACHE / f"vectors-{kind}-seed{seed}-{_model_tag()}.npy"
    have = np.load(path) if path.exists() else np.zeros((0, 384), dtype=np.float32)
    if len(have) < count:
        embedder = embedder_factory()
        texts = [r.embedded_text for r in rows(kind, seed, len(have), count)]
        log(f"  embedding {len(texts)} {kind} texts for the store (cached in {path.parent}) ...")
        t0 = time.perf_counter()
        # length-sorted batches of 8, as the binary embeds: on 2 cores about twice the texts/s of batches
        # of 64, and a text's vector does not depend on its batch (docs/internals/embedding.md, "Embedding")
        new = embedder.embed_many(texts, batch=8, progress=_progress(f"  embedded {kind}"))
        log(f"  embedded {len(texts)} texts in {time.perf_counter() - t0:.1f} s")
        have = np.concatenate([have, new])
        np.save(path, have)
    return have[:count]


def synthetic_vectors(kind: str, seed: int, start: int, stop: int) -> np.ndarray:
    """Random unit vectors for rows `start..stop` (deterministic per row block)."""
    rng = np.random.default_rng([seed, 1 if kind == "fix" else 2, start])
    v = rng.standard_normal((stop - start, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def vectors(kind: str, seed: int, start: int, stop: int, mode: str, real_max: int, embedder_factory,
            log=print) -> np.ndarray:
    """Vectors of rows `start..stop`: real below `real_max` (all real for mode `real`, none for
    `synthetic`), synthetic above."""
    limit = {"real": stop, "synthetic": 0}.get(mode, real_max)
    real_stop = min(stop, limit)
    parts = []
    if start < real_stop:
        parts.append(real_vectors(kind, seed, real_stop, embedder_factory, log)[start:real_stop])
    if stop > max(start, real_stop):
        parts.append(synthetic_vectors(kind, seed, max(start, real_stop), stop))
    return np.concatenate(parts) if parts else np.zeros((0, 384), dtype=np.float32)


def _progress(label: str):
    """A progress callback that rewrites one stderr line (only on a terminal)."""
    def show(done: int, total: int) -> None:
        """Rewrites the progress line."""
        if sys.stderr.isatty():
            end = "\n" if done >= total else ""
            sys.stderr.write(f"\r{label} {done}/{total}{end}")
            sys.stderr.flush()
    return show


# ---------------------------------------------------------------------------------------------------------
# astra-mcp: export rows and `memory import`


def export_header(binary: str, workdir: Path) -> dict:
    """The binary's own export header (model id, dimension, format version): serve once on a fresh store
    in `workdir`, then `memory export` it and read line 1."""
    db = workdir / "header-db"
    server = StdioServer([binary, "serve", "--stdio", "--db", str(db)]).start()
    server.initialize("2025-06-18")
    server.stop()
    out = subprocess.run([binary, "memory", "export", "--db", str(db)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[0])


def fix_export_row(row: dataset.FixRow, vector, actor: str) -> dict:
    """A `fixes` row as `memory export` writes it (trust-mode fix: unverified, no receipt)."""
    return {
        "id": row.id, "actor_id": actor, "project": row.project, "session_id": row.id,
        "created_at": row.created_at, "updated_at": row.created_at,
        "fix_description": row.fix_description, "error_type": row.error_type,
        "error_type_key": row.error_type.lower(), "file_paths": row.file_paths, "outcome": row.outcome,
        "verified": False, "receipt": None, "embedded_text": row.embedded_text, "vector": vector,
    }


def passage_export_row(row: dataset.PassageRow, vector, actor: str, turn: int) -> dict:
    """An `archival` row as `memory export` writes it."""
    return {
        "id": row.id, "actor_id": actor, "project": row.project, "session_id": row.id, "turn": turn,
        "source": "archival_memory_insert", "tags": row.tags, "text": row.text,
        "created_at": row.created_at, "updated_at": row.created_at, "embedded_text": row.text,
        "superseded_by": None, "vector": vector,
    }


def _vector_json(v) -> list:
    """A vector as a JSON list (float32 values rounded to 7 significant digits, as f32 carries)."""
    return [float(f"{x:.7g}") for x in v]


def write_export(path: Path, header: dict, kind: str, row_list: list, vecs, actor: str, first_index: int) -> int:
    """Writes one import file: the header, then one `{"table", "row"}` line per row. `vecs` None writes
    empty vectors (the import fills them when the header names another model). Returns the raw bytes of
    the rows' text and vectors (for the disk ratio)."""
    raw = 0
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for k, row in enumerate(row_list):
            vec = _vector_json(vecs[k]) if vecs is not None else []
            if kind == "fix":
                line = {"table": "fixes", "row": fix_export_row(row, vec, actor)}
                raw += len(row.fix_description.encode()) + len(row.embedded_text.encode())
            else:
                line = {"table": "archival", "row": passage_export_row(row, vec, actor, first_index + k)}
                raw += 2 * len(row.text.encode())
            raw += 384 * 4
            f.write(json.dumps(line) + "\n")
    return raw


def run_import(binary: str, db: Path, path: Path, actor: str) -> float:
    """`astra-mcp memory import FILE` into `db`; returns seconds. Raises with stderr on failure."""
    t0 = time.perf_counter()
    p = subprocess.run([binary, "memory", "import", "--db", str(db), "--actor", actor, str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"memory import failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return time.perf_counter() - t0


def run_optimize(binary: str, db: Path, prune_older_than: int | None = None) -> float:
    """`astra-mcp memory optimize`: folds rows added since the full-text index was built into it and
    compacts fragments (the server does the same in the background every 100 writes); old versions are
    pruned after `prune_older_than` s (the binary's default, 60, when None). Returns seconds."""
    t0 = time.perf_counter()
    argv = [binary, "memory", "optimize", "--db", str(db)]
    if prune_older_than is not None:
        argv += ["--prune-older-than", str(prune_older_than)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"memory optimize failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return time.perf_counter() - t0


def grow_astra_store(binary: str, db: Path, header: dict, kind: str, have: int, want: int, *, seed: int,
                     actor: str, vector_mode: str, real_max: int, part_rows: int, embedder_factory,
                     workdir: Path, log=print) -> dict:
    """Adds rows `have..want` of `kind` to the store through `memory import`, in files of `part_rows`
    rows (each file is written, imported and deleted, so a 1M load needs no 5 GB file), then runs
    `memory optimize`. Returns timings: file generation, import, optimize, rows/s of the import."""
    gen_s = import_s = 0.0
    raw = 0
    for start in range(have, want, part_rows):
        stop = min(want, start + part_rows)
        t0 = time.perf_counter()
        batch = rows(kind, seed, start, stop)
        vecs = vectors(kind, seed, start, stop, vector_mode, real_max, embedder_factory, log)
        path = workdir / f"import-{kind}-{start}.jsonl"
        raw += write_export(path, header, kind, batch, vecs, actor, start)
        gen_s += time.perf_counter() - t0
        import_s += run_import(binary, db, path, actor)
        path.unlink()
        log(f"  {kind}: {stop}/{want} rows imported ({import_s:.1f} s in import so far)")
    optimize_s = run_optimize(binary, db) if want > have else 0.0
    added = want - have
    return {
        "rows_added": added, "generate_s": round(gen_s, 2), "import_s": round(import_s, 2),
        "import_rows_per_s": round(added / import_s, 1) if import_s else None,
        "optimize_s": round(optimize_s, 2), "raw_bytes_added": raw,
    }


def store_disk(db: Path, raw_bytes: int) -> dict:
    """Disk use of the store (and of each table's folder) against the raw bytes of the rows' text and
    vectors."""
    used = dir_bytes(db)
    tables = {p.name.removesuffix(".lance"): dir_bytes(p) for p in sorted(db.glob("*.lance"))}
    return {"disk_bytes": used, "raw_bytes": raw_bytes, "tables_bytes": tables,
            "disk_over_raw": round(used / raw_bytes, 2) if raw_bytes else None}


# ---------------------------------------------------------------------------------------------------------
# mcp-server-qdrant: offline fastembed cache and an embedded-Qdrant folder


def fastembed_cache(dest: Path) -> Path:
    """Lays out the Hugging Face cache fastembed looks up for sentence-transformers/all-MiniLM-L6-v2
    (refs/main naming a 40-hex revision, snapshots/<revision>/ with the model and tokenizer files),
    linking astra-mcp's own files, so both servers run the same model.onnx with no network."""
    revision = hashlib.sha1(b"astra-mcp-bench").hexdigest()
    repo = dest / QDRANT_HF_REPO
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for name in QDRANT_MODEL_FILES:
        link = snapshot / name
        if not link.exists():
            os.symlink(MODEL_DIR / name, link)
    return dest


def qdrant_env(cache: Path, data: Path, collection: str = "bench") -> dict:
    """Environment for mcp-server-qdrant: offline fastembed cache, embedded Qdrant in `data`."""
    env = dict(os.environ)
    env.update({
        "FASTEMBED_CACHE_PATH": str(cache), "HF_HUB_OFFLINE": "1", "QDRANT_LOCAL_PATH": str(data),
        "COLLECTION_NAME": collection, "EMBEDDING_MODEL": "sentence-transformers/all-MiniLM-L6-v2",
    })
    env.pop("QDRANT_URL", None)
    env.pop("QDRANT_API_KEY", None)
    return env


def qdrant_argv() -> list[str]:
    """The command that runs mcp-server-qdrant over stdio (`python -m` does nothing: call main())."""
    return [sys.executable, "-c",
            "import sys; sys.argv = ['mcp-server-qdrant']; from mcp_server_qdrant.main import main; main()"]


def grow_qdrant_store(data: Path, texts: list[str], vecs: np.ndarray, have: int, collection: str = "bench") -> float:
    """Adds points `have..len(texts)` to the embedded Qdrant in `data` (payload as qdrant-store writes
    it: `document` + `metadata`), creating the collection as mcp-server-qdrant would. Returns seconds."""
    import uuid

    from qdrant_client import QdrantClient, models

    t0 = time.perf_counter()
    client = QdrantClient(path=str(data))
    try:
        if not client.collection_exists(collection):
            client.create_collection(collection, vectors_config={
                QDRANT_VECTOR_NAME: models.VectorParams(size=384, distance=models.Distance.COSINE)})
        for start in range(have, len(texts), 1000):
            stop = min(len(texts), start + 1000)
            client.upsert(collection, points=[
                models.PointStruct(id=str(uuid.UUID(int=i + 1)), vector={QDRANT_VECTOR_NAME: vecs[i].tolist()},
                                   payload={"document": texts[i], "metadata": None})
                for i in range(start, stop)])
    finally:
        client.close()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------------------
# the binary's own benchmark commands: `astra-mcp-dev bench embed|populate|recall`, `memory ingest`


def write_lines(path: Path, texts: list[str]) -> Path:
    """One text per line (the input of `astra-mcp-dev bench`); refuses texts with a newline or blank ones,
    which the binary would split or skip, so both sides of a comparison embed exactly these texts."""
    for t in texts:
        if "\n" in t or "\r" in t or not t.strip() or t != t.strip():
            raise ValueError(f"text not fit for a one-per-line file: {t[:80]!r}")
    path.write_text("\n".join(texts) + "\n")
    return path


def _json_lines(stdout: str) -> list[dict]:
    """The JSON objects a `bench` command printed (one per line)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _run(argv: list[str], what: str, timeout: float | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Runs a command; returns it and its wall seconds. Raises with stderr on failure."""
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p, secs


def bench_embed(binary: str, texts_file: Path, batches: list[int], sort_by_length: bool = False,
                one_batch: bool = False) -> list[dict]:
    """`astra-mcp-dev bench embed --texts FILE --batch B,... [--sort-by-length] [--one-batch]`: the binary's
    texts/s per batch size (one pass over the texts after one warm-up batch, model load excluded); with
    `one_batch` each call of B texts is one ONNX batch of B, else the server's own batching."""
    argv = [dev_binary(binary), "bench", "embed", "--texts", str(texts_file), "--batch", ",".join(map(str, batches))]
    if sort_by_length:
        argv.append("--sort-by-length")
    if one_batch:
        argv.append("--one-batch")
    p, _ = _run(argv, "astra-mcp-dev bench embed")
    return _json_lines(p.stdout)


def memory_ingest(binary: str, db: Path, jsonl: Path, actor: str, project: str) -> dict:
    """`astra-mcp memory ingest` of a JSONL file of `{"text", "tags"}` into `db`: the binary's own line
    (`ingested N passages (M already stored) in S s: R passages/s`, timed from the first embedding to the
    last commit, model load included) and the command's wall time (process start, store open and the
    index builds at the end included)."""
    import re

    p, wall = _run([binary, "memory", "ingest", "--db", str(db), "--actor", actor, "--project", project, str(jsonl)],
                   "astra-mcp memory ingest")
    m = re.search(r"ingested (\d+) passages \((\d+) already stored[^)]*\) in ([\d.]+) s: ([\d.]+) passages/s", p.stdout)
    if not m:
        raise RuntimeError(f"memory ingest: unexpected output {p.stdout.strip()[-500:]!r}")
    return {"ingested": int(m[1]), "already_stored": int(m[2]), "seconds": float(m[3]),
            "passages_per_s": float(m[4]), "wall_s": round(wall, 2), "output": p.stdout.strip()}


def bench_populate(binary: str, db: Path, texts_file: Path, rows: int, seed: int, actor: str, project: str) -> dict:
    """`astra-mcp-dev bench populate`: `rows` archival passages over the texts of the file (each embedded for
    real; further rows = a text with a `(#i)` suffix and its vector plus seeded noise), then the full-text
    and vector indexes, then the store's upkeep (compaction, pruning). Returns the binary's JSON and the
    command's wall time."""
    p, wall = _run([dev_binary(binary), "bench", "populate", "--db", str(db), "--actor", actor, "--project", project,
                    "--texts", str(texts_file), "--rows", str(rows), "--seed", str(seed)], "astra-mcp-dev bench populate")
    out = _json_lines(p.stdout)[-1]
    out.pop("machine", None)
    out["wall_s"] = round(wall, 1)
    return out


def bench_recall(binary: str, db: Path, queries_file: Path, actor: str, k: int = 10) -> dict:
    """`astra-mcp-dev bench recall`: recall@k of the archival vector search through its index against exact
    search on the same query embeddings, and both store-only latencies (p50/p99 ms)."""
    p, wall = _run([dev_binary(binary), "bench", "recall", "--db", str(db), "--actor", actor, "--queries", str(queries_file),
                    "--k", str(k)], "astra-mcp-dev bench recall")
    out = _json_lines(p.stdout)[-1]
    out.pop("machine", None)
    out["wall_s"] = round(wall, 1)
    return out


def stats(binary: str, db: Path) -> list | None:
    """`astra-mcp memory stats --json` (rows, bytes, fragments, indexes, versions per table), or None."""
    p = subprocess.run([binary, "memory", "stats", "--db", str(db), "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None
