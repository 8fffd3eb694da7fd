"""Install to first search result, from an empty home: astra-mcp from its wheel beside mcp-server-qdrant
from a local wheel cache, on the same machine in the same run, taking turns.

astra-mcp: `uv tool install <wheel>`, then `astra-mcp serve --stdio` (the README's two steps), then
`archival_memory_insert` of one passage and `archival_memory_search` until the passage comes back.
mcp-server-qdrant: `uvx mcp-server-qdrant` (install and start in one step) from a folder of its pinned
wheels (bench/requirements.txt), then `qdrant-store` and `qdrant-find`. Each run has a new home and an
empty uv cache, so every package is unpacked and installed; both run offline. mcp-server-qdrant gets
its model from a prepared fastembed cache (it would download it from the Hugging Face hub on a first
run, which this measures without); astra-mcp's model comes inside its wheel.

Usage: bench/run install --wheel PATH [--runs N] [--json FILE]   (called through bench/run's venv)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import common
import stores

PASSAGE = "Comma-separated ALLOWED_ORIGINS kept the space after each comma; strip() every entry and drop blanks."
QUERY = "second allowed origin rejected: leading space in the origins list"
PEER = "mcp-server-qdrant==0.8.1"


def fresh_env(home: Path) -> dict:
    """A new user's environment: HOME, XDG dirs and uv's cache under `home`, offline, no astra-mcp settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASTRA_", "ORT_", "XDG_", "UV_", "VIRTUAL_ENV", "QDRANT_", "FASTEMBED_"))}
    env.update({
        "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CONFIG_HOME": str(home / ".config"), "UV_CACHE_DIR": str(home / ".cache/uv"), "UV_OFFLINE": "1",
        "UV_PYTHON": os.path.realpath(sys.executable), "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1",
        "ASTRA_LOG": "warn",
    })
    return env


def text_of(result: dict) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


def astra_run(uv: Path, wheel: Path) -> dict:
    home = common.make_temp_dir("astra-install-")
    project = home / "project"
    project.mkdir()
    env = fresh_env(home)
    try:
        t0 = time.perf_counter()
        subprocess.run([str(uv), "tool", "install", str(wheel)], env=env, check=True, capture_output=True)
        installed = time.perf_counter() - t0
        server = common.StdioServer([str(home / ".local/bin/astra-mcp"), "serve", "--stdio"], env=env)
        server.started = t0
        server.proc = subprocess.Popen(server.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env=env, cwd=project, bufsize=0)
        try:
            server.initialize("2025-06-18")
            server.call_tool("archival_memory_insert", {"text": PASSAGE})
            hit = server.call_tool("archival_memory_search", {"query": QUERY, "top_k": 1})
            total = time.perf_counter() - t0
            assert "strip() every entry" in text_of(hit), text_of(hit)
        finally:
            server.stop()
        return {"install_s": round(installed, 2), "first_result_s": round(total, 2)}
    finally:
        common.remove_temp_dir(home)


def peer_run(uv: Path, wheels: Path, fastembed: Path) -> dict:
    home = common.make_temp_dir("qdrant-install-")
    env = fresh_env(home)
    peer = stores.qdrant_env(fastembed, home / "qdrant", collection="install")
    env.update({k: peer[k] for k in ("FASTEMBED_CACHE_PATH", "HF_HUB_OFFLINE", "QDRANT_LOCAL_PATH", "COLLECTION_NAME",
                                     "EMBEDDING_MODEL")})
    uvx = uv.parent / "uvx"
    argv = [str(uvx), "--no-index", "--find-links", str(wheels), PEER]
    try:
        server = common.StdioServer(argv, env=env).start()
        try:
            server.initialize("2025-06-18", timeout=300)
            server.call_tool("qdrant-store", {"information": PASSAGE})
            hit = server.call_tool("qdrant-find", {"query": QUERY})
            total = server.elapsed()
            assert "strip() every entry" in text_of(hit), text_of(hit)
        finally:
            server.stop()
        return {"first_result_s": round(total, 2)}
    finally:
        common.remove_temp_dir(home)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, required=True, help="the astra-mcp wheel (scripts/wheel prints its path)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    uv = common.CACHE_DIR / "venv" / "bin" / "uv"
    wheels = common.BENCH_CACHE / "peer-wheels"
    if not any(wheels.glob("mcp_server_qdrant-*.whl")):
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "-d", str(wheels),
                        PEER, "-c", str(common.BENCH_DIR / "requirements.txt")], check=True)
    fastembed = stores.fastembed_cache(common.BENCH_CACHE / "fastembed")
    results = {"astra-mcp": [], "mcp-server-qdrant": []}
    for i in range(args.runs):
        results["astra-mcp"].append(astra_run(uv, args.wheel))
        results["mcp-server-qdrant"].append(peer_run(uv, wheels, fastembed))
        print(f"run {i + 1}: astra-mcp {results['astra-mcp'][-1]}, mcp-server-qdrant {results['mcp-server-qdrant'][-1]}",
              file=sys.stderr)
    report = {
        "machine": common.machine_facts(),
        "wheel": args.wheel.name,
        "wheel_bytes": args.wheel.stat().st_size,
        "runs": results,
        "median_first_result_s": {
            name: common.summarize([r["first_result_s"] for r in runs])["median"] for name, runs in results.items()
        },
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
