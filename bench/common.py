"""Shared pieces of the benchmark harness: machine facts, statistics, temp dirs, process memory, and a
minimal MCP client that speaks raw JSON-RPC over a child's stdin/stdout (newline-delimited, as the MCP
stdio transport defines it), so what is timed is the server, not an SDK.
"""

from __future__ import annotations

import json
import os
import platform
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = Path(os.environ.get("ASTRA_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "astra-mcp")
MODEL_DIR = Path(os.environ.get("ASTRA_MODEL_DIR") or CACHE_DIR / "models" / "all-MiniLM-L6-v2-int8")
BENCH_CACHE = CACHE_DIR / "bench-cache"


# ---------------------------------------------------------------------------------------------------------
# machine facts and statistics


def dev_binary(binary: str) -> str:
    """The developers' binary beside `binary` (`astra-mcp-dev`: `bench`, `eval`; the workspace's other
    package, built by scripts/test or `cargo build --release -p astra-mcp-dev`)."""
    return str(Path(binary).with_name("astra-mcp-dev"))


def machine_facts() -> dict:
    """Cores, memory, CPU model, kernel, load average and Python version: printed with every result."""
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": cpu_model,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": mem_total_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average_1_5_15": load,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values: list[float], digits: int = 2) -> dict:
    """Median and spread (min, p90, p99, max) and the sample count of a list of numbers."""
    if not values:
        return {"n": 0}
    r = lambda x: round(x, digits)  # noqa: E731
    return {
        "n": len(values),
        "median": r(percentile(values, 50)),
        "min": r(min(values)),
        "p90": r(percentile(values, 90)),
        "p99": r(percentile(values, 99)),
        "max": r(max(values)),
    }


# ---------------------------------------------------------------------------------------------------------
# temp dirs and process memory


def make_temp_dir(prefix: str) -> Path:
    """A fresh directory under the system temp dir; every `--db` the harness uses lives in one of these."""
    return Path(tempfile.mkdtemp(prefix=f"astra-bench-{prefix}-"))


def remove_temp_dir(path: Path) -> None:
    """Deletes a directory made by `make_temp_dir` (refuses anything that is not one)."""
    tmp = Path(tempfile.gettempdir()).resolve()
    path = path.resolve()
    if path.parent != tmp or not path.name.startswith("astra-bench-"):
        raise ValueError(f"refusing to delete {path}: not a harness temp dir")
    shutil.rmtree(path, ignore_errors=True)


def dir_bytes(path: Path) -> int:
    """Bytes of every regular file under `path` (apparent size, as `du -b` counts)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def process_memory(pid: int) -> dict:
    """Resident memory of a process from /proc/PID/status: current RSS and its peak (VmHWM), in MiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key = "rss_mib" if line.startswith("VmRSS") else "peak_rss_mib"
                out[key] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


# ---------------------------------------------------------------------------------------------------------
# raw JSON-RPC over stdio


class ServerError(RuntimeError):
    """The server under test died, timed out, or answered a request with a JSON-RPC error."""


@dataclass
class StdioServer:
    """One MCP server process spoken to with newline-delimited JSON-RPC over its pipes.

    `started` is the perf_counter() just before the spawn, so `elapsed()` is time since spawn. Server
    notifications and log messages are skipped; a request from the server (e.g. `ping`) gets an empty
    result, as a client owes it.
    """

    argv: list[str]
    env: dict | None = None
    stderr_path: Path | None = None
    started: float = 0.0
    proc: subprocess.Popen | None = None
    _buf: bytes = b""
    _next_id: int = 1
    protocol_version: str | None = None
    server_info: dict = field(default_factory=dict)

    def start(self) -> "StdioServer":
        """Spawns the process (stdout and stdin as pipes, stderr to `stderr_path` or discarded)."""
        err = open(self.stderr_path, "ab") if self.stderr_path else subprocess.DEVNULL
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=self.env, bufsize=0
        )
        if err is not subprocess.DEVNULL:
            err.close()
        return self

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.proc.pid

    def elapsed(self) -> float:
        """Seconds since just before the spawn."""
        return time.perf_counter() - self.started

    def send(self, message: dict) -> None:
        """Writes one JSON-RPC message as one line."""
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _read_message(self, deadline: float) -> dict:
        """Reads the next complete line from stdout as JSON, waiting at most until `deadline`."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise ServerError(f"timed out waiting for {self.argv[0]}")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise ServerError(f"{self.argv[0]} closed stdout (exit code {self.proc.poll()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, method: str, params: dict | None = None, timeout: float = 120.0) -> dict:
        """Sends a request and returns its `result`, answering or skipping whatever comes in between."""
        rid = self._next_id
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.perf_counter() + timeout
        while True:
            msg = self._read_message(deadline)
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise ServerError(f"{method}: {msg['error']}")
                return msg["result"]
            if "method" in msg and "id" in msg:  # a request from the server
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})

    def initialize(self, protocol_version: str, timeout: float = 120.0) -> dict:
        """`initialize` then `notifications/initialized`; remembers the version and serverInfo answered."""
        result = self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": {},
                "clientInfo": {"name": "astra-bench", "version": "1"},
            },
            timeout,
        )
        self.protocol_version = result.get("protocolVersion")
        self.server_info = result.get("serverInfo", {})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def call_tool(self, name: str, arguments: dict, timeout: float = 120.0) -> dict:
        """`tools/call`; raises when the result is `isError: true`, so a failed search is never timed."""
        result = self.request("tools/call", {"name": name, "arguments": arguments}, timeout)
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content", []))
            raise ServerError(f"{name} returned isError: {text[:300]}")
        return result

    def stop(self, timeout: float = 30.0) -> int | None:
        """Closes stdin (the stdio way to end a session) and waits; kills the process if it lingers."""
        if self.proc is None:
            return None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
