"""Wall time of `astra-mcp hook claude-code`, from spawn to exit, on a store of N fixes and N archival
passages (default 10k each), warm page cache: the hook is a new process per Claude Code event, so every run
pays the process start, the store open and (for the events that search or count tokens) the model load.

    python3 bench/hook.py [--binary BIN] [--rows 10000] [--runs 30] [--keep DIR]

The store: `bench populate` writes N archival passages (the dataset's texts, real vectors plus noise), then
`memory import` adds N fixes of the dataset (their texts with seeded unit vectors: the search reads them as
it reads real ones), then a real agent session over MCP (`serve --stdio` on a copy of scenario_alpha:
search, failing `run_tests`, the reference fix, passing `run_tests`, `store_fix_memory`, two core blocks)
stores the one verified fix the failing run must bring up. Each scenario runs 3 times unmeasured, then
`--runs` times; the hook's stdout is checked (context or nothing, as expected) so a broken run is never
timed. Pure standard library (no bench venv needed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import dataset  # noqa: E402
from common import StdioServer, dev_binary, machine_facts  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ASTRA_CACHE_DIR", Path.home() / ".cache" / "astra-mcp"))
ACTOR = "bench"


def default_binary() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return os.environ.get("ASTRA_MCP_BIN", str(target / "release" / "astra-mcp"))


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({p.returncode}): {p.stderr.strip()[-1500:]}")
    return p


def unit_vector(rng: random.Random) -> list:
    v = [rng.gauss(0.0, 1.0) for _ in range(384)]
    n = math.sqrt(sum(x * x for x in v))
    return [float(f"{x / n:.7g}") for x in v]


def build_store(binary: str, db: Path, alpha: Path, rows: int, work: Path) -> str:
    """Fills `db`; returns the failing pytest output of `alpha` before its fix."""
    texts = work / "texts.txt"
    texts.write_text("\n".join(dataset.one_line(dataset.passage_row(1, i).text) for i in range(300)) + "\n")
    t0 = time.perf_counter()
    run([dev_binary(binary), "bench", "populate", "--db", str(db), "--actor", ACTOR, "--project", "scenario_alpha",
         "--texts", str(texts), "--rows", str(rows)])
    print(f"  {rows} archival passages in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    header = run([binary, "memory", "export", "--db", str(db), "--actor", ACTOR]).stdout.splitlines()[0]
    fixes = work / "fixes.jsonl"
    rng = random.Random(7)
    with open(fixes, "w") as f:
        f.write(header + "\n")
        for i in range(rows):
            r = dataset.fix_row(1, i)
            row = {
                "id": r.id, "actor_id": ACTOR, "project": r.project, "session_id": r.id,
                "created_at": r.created_at, "updated_at": r.created_at, "fix_description": r.fix_description,
                "error_type": r.error_type, "error_type_key": r.error_type.lower(), "file_paths": r.file_paths,
                "outcome": r.outcome, "verified": False, "receipt": None,
                "embedded_text": r.embedded_text, "vector": unit_vector(rng),
            }
            f.write(json.dumps({"table": "fixes", "row": row}) + "\n")
    t0 = time.perf_counter()
    run([binary, "memory", "import", "--db", str(db), "--actor", ACTOR, str(fixes)])
    print(f"  {rows} fixes in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    pytest = f"{CACHE / 'venv/bin/python'} -m pytest -q -p no:cacheprovider"
    failing = subprocess.run(pytest, shell=True, cwd=alpha, capture_output=True, text=True,
                             env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert failing.returncode == 1, failing.stdout
    server = StdioServer([binary, "serve", "--stdio", "--db", str(db), "--actor", ACTOR, "--workspace",
                          str(alpha), "--test-command", pytest]).start()
    try:
        server.initialize("2025-06-18")
        server.call_tool("search_codebase_memory",
                         {"query": "CORS second origin rejected", "error_type": None, "top_k": 3})
        server.call_tool("run_tests", {})
        ref = REPO / "scripts/reference_fixes/scenario_alpha"
        for path in ref.rglob("*"):
            if path.is_file():
                shutil.copy(path, alpha / path.relative_to(ref))
        passing = server.call_tool("run_tests", {})["structuredContent"]
        server.call_tool("store_fix_memory", {
            "fix_description": "ALLOWED_ORIGINS entries kept the space after each comma: strip() every entry and "
                               "drop blanks in webapp/settings.py",
            "error_type": "AssertionError", "file_paths": ["webapp/settings.py"],
            "outcome": passing["confirmed_outcome"]})
        for section, text in (("human", "Prefers small commits and reviews every pull request."),
                              ("project", "scenario_alpha: a small web app; tests run with pytest -q.")):
            server.call_tool("core_memory_append", {"section": section, "text": text})
    finally:
        server.stop()
    return failing.stdout + failing.stderr


def time_hook(binary: str, db: Path, payload: dict, expect_context: bool, runs: int) -> list:
    argv = [binary, "hook", "claude-code", "--db", str(db), "--actor", ACTOR]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASTRA_HOOK", "CLAUDE_"))}
    env.pop("ASTRA_HOOKS", None)
    data = json.dumps(payload).encode()
    times = []
    for i in range(runs + 3):
        t0 = time.perf_counter()
        p = subprocess.run(argv, input=data, capture_output=True, env=env)
        elapsed = (time.perf_counter() - t0) * 1000
        if p.returncode != 0 or bool(p.stdout) != expect_context:
            raise RuntimeError(f"{payload['hook_event_name']}: exit {p.returncode}, stdout {p.stdout[:200]!r}, "
                               f"stderr {p.stderr.decode()[-500:]}")
        if i >= 3:
            times.append(elapsed)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=default_binary())
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (reused when it exists)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="astra-hook-bench-"))
    try:
        base = args.keep or work
        db, alpha = base / "db", base / "scenario_alpha"
        failing_file = base / "failing.txt"
        if not db.exists():
            shutil.copytree(REPO / "demo_projects/scenario_alpha", alpha)
            failing_file.write_text(build_store(args.binary, db, alpha, args.rows, work))
        failing = failing_file.read_text()
        common = {"session_id": "bench", "transcript_path": str(alpha / "t.jsonl"), "cwd": str(alpha)}
        scenarios = [
            ("SessionStart (core, recent fixes, decisions)", True,
             {**common, "hook_event_name": "SessionStart", "source": "startup"}),
            ("PostToolUseFailure, failing pytest (search, 1 match)", True,
             {**common, "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
              "tool_input": {"command": "python -m pytest -q"}, "tool_use_id": "t",
              "error": "Exit code 1\n" + failing}),
            ("PostToolUse, not a test command (parse only)", False,
             {**common, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"},
              "tool_response": {"stdout": "README.md\n", "stderr": ""}, "tool_use_id": "t"}),
        ]
        results = {}
        for name, expect, payload in scenarios:
            times = time_hook(args.binary, db, payload, expect, args.runs)
            q = statistics.quantiles(times, n=10)
            results[name] = {"p50": statistics.median(times), "p90": q[8], "min": min(times), "max": max(times)}
            print(f"{name}: p50 {results[name]['p50']:.0f} ms, p90 {q[8]:.0f}, min {min(times):.0f}, "
                  f"max {max(times):.0f} ({args.runs} runs)")
        print(json.dumps({"machine": machine_facts(), "rows": args.rows, "runs": args.runs, "results": results},
                         indent=1), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
