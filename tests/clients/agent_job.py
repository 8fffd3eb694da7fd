#!/usr/bin/env python3
"""The main job of astra-mcp through real agent clients (Codex CLI, Claude Code) with a scripted model.

Each client is the pinned npm package (tests/clients/package-lock.json); it starts astra-mcp from the
configuration docs/clients.md tells users to write (the fenced block after a `<!-- test: NAME -->` line,
placeholders filled in: binary, project, test command, actor, URL; the test only adds its own store and
cache to the server's env). The model is scripted_model.py: it decides nothing, it plays a fixed list of
moves, and these checks are about what the client carried between our server and the model, never about a
model's skill.

  session 1 (scenario_alpha): the client's tool search loads our tools -> store_fix_memory before any search
    (refused) -> search_codebase_memory (empty) -> the client's shell runs the tests (failing) -> the shell
    applies scripts/reference_fixes/scenario_alpha (the edit) -> run_tests through MCP (passes) -> the shell
    edits a file -> store with that outcome (refused: files changed) -> run_tests (passes) -> store (stored).
  session 2 (scenario_beta, a new client process, same store): tool search -> the shell runs the tests
    (failing) -> search_codebase_memory with the assertion lines the run printed -> Match 1 is alpha's fix.

Checked on the recorded model requests: our tools as the client listed them against schemas/*.json, every
tool result the model got back (the `Match 1` block, each refusal as a tool result and the turn going on,
`confirmed_outcome`), and that no secret (the model key, the MCP bearer token) is in any request body.
Then the session files the clients wrote are imported with `astra-mcp sessions import` and their turns are
found with `conversation_search` (official MCP Python SDK).

Usage: agent_job.py JOB BINARY WORKDIR    JOB: codex | claude | cross-http
Prints one JSON summary line last; exits 1 with the reason on the first failed check.
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from scripted_model import ScriptedModel, advertised_tools, tool_results  # noqa: E402

BIN = HERE / "node_modules" / ".bin"
PYTHON = sys.executable  # the tooling venv: pytest and the MCP SDK
TEST_COMMAND = f"{PYTHON} -m pytest -q -p no:cacheprovider"
OPENAI_KEY = "sk-proj-scriptedFAKEkey0123456789abcdefABCDEF"
ANTHROPIC_KEY = "sk-ant-api03-scriptedFAKEkey0123456789abcdefABCDEF"
HTTP_TOKEN = "astra-http-token-0123456789abcdef"
OTHER_SECRET = "ghp_scriptedFAKEtoken0123456789abcdefABCD"  # in every client's env, never to be sent
ACTOR = "tester"
OUR_TOOLS = sorted(p.stem for p in (ROOT / "schemas").glob("*.json"))
SCHEMAS = {name: json.loads((ROOT / "schemas" / f"{name}.json").read_text()) for name in OUR_TOOLS}
ALPHA_QUERY = ("second allowed origin is rejected by the CORS check; origins parsed from the comma-separated "
               "ALLOWED_ORIGINS env value keep a leading space")
ALPHA_FIX = ("Comma-separated settings read from an environment variable kept the whitespace after each comma, so "
             "every entry after the first failed exact comparison. Fix: split on ',', strip() each entry and drop "
             "blank entries before using the list.")
ALPHA_FILES = ["webapp/config.py"]


class CheckFailed(Exception):
    pass


def check(condition, message, detail=""):
    if not condition:
        raise CheckFailed(f"{message}\n{detail}" if detail else message)


# --- the documented configuration -------------------------------------------------------------------

def docs_block(name):
    """The fenced block right after `<!-- test: NAME -->` in docs/clients.md."""
    text = (ROOT / "docs" / "clients.md").read_text()
    found = re.search(r"<!-- test: " + re.escape(name) + r" -->\s*```[a-z]*\n(.*?)```", text, re.S)
    check(found is not None, f"docs/clients.md has no block marked <!-- test: {name} -->")
    return found.group(1)


def fill(value, places):
    """`value` with each placeholder string replaced (recursively through dicts and lists)."""
    if isinstance(value, str):
        for old, new in places.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: fill(v, places) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, places) for v in value]
    return value


def places(binary, workspace, url=None):
    out = {"/path/to/astra-mcp": str(binary), "/path/to/project": str(workspace),
           "python3 -m pytest -q": TEST_COMMAND, "your-name": ACTOR}
    if url:
        out["http://127.0.0.1:8765/mcp"] = url
    return out


def server_env(db):
    """What the test adds to the documented server env: its own store, the model cache, quiet logs."""
    cache = os.environ.get("ASTRA_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or
                                                          Path.home() / ".cache") / "astra-mcp")
    return {"ASTRA_DB": str(db), "ASTRA_CACHE_DIR": cache, "ASTRA_LOG": "warn"}


def toml_value(value):
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


# --- running the clients ----------------------------------------------------------------------------

def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX", "ASTRA_"))}
    env["GITHUB_TOKEN"] = OTHER_SECRET
    env.update(extra)
    return env


def run_codex(work, name, workspace, moves, mcp_block, extra_env=None, prompt="Fix the failing tests."):
    """One `codex exec` process in `workspace` against a scripted Responses API; returns the model."""
    home = work / f"codex-home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    model = ScriptedModel("openai", moves, record=str(work / f"requests-{name}.json")).start()
    config = "\n".join([
        'model = "gpt-5.5"', 'model_provider = "scripted"', 'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"', "",
        "[model_providers.scripted]", 'name = "scripted"', f'base_url = "{model.url}/v1"',
        'wire_api = "responses"', 'env_key = "OPENAI_API_KEY"', "", mcp_block])
    (home / "config.toml").write_text(config)
    env = clean_env(CODEX_HOME=str(home), OPENAI_API_KEY=OPENAI_KEY, **(extra_env or {}))
    try:
        done = subprocess.run([str(BIN / "codex"), "exec", "--skip-git-repo-check", prompt], cwd=workspace, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    finally:
        model.stop()
    model.output = done
    check(done.returncode == 0, f"codex exec ({name}) exited {done.returncode}", done.stdout[-3000:] + done.stderr[-3000:])
    return model


def run_claude(work, name, workspace, moves, mcp_config, extra_env=None, prompt="Fix the failing tests."):
    """One `claude -p` process in `workspace` against a scripted Messages API; returns the model."""
    config_dir = work / f"claude-config-{name}"
    config_dir.mkdir(parents=True, exist_ok=True)
    config_file = work / f"mcp-{name}.json"
    config_file.write_text(json.dumps(mcp_config, indent=2))
    model = ScriptedModel("anthropic", moves, record=str(work / f"requests-{name}.json")).start()
    env = clean_env(CLAUDE_CONFIG_DIR=str(config_dir), ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", **(extra_env or {}))
    try:
        done = subprocess.run([str(BIN / "claude"), "-p", prompt, "--output-format", "json",
                               "--mcp-config", str(config_file), "--strict-mcp-config",
                               "--allowedTools", "mcp__astra", "Bash"],
                              cwd=workspace, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=240)
    finally:
        model.stop()
    model.output = done
    check(done.returncode == 0, f"claude -p ({name}) exited {done.returncode}", done.stdout[-3000:] + done.stderr[-3000:])
    return model


# --- the scripts ------------------------------------------------------------------------------------

class Dialect:
    """How a script names things for one client: its tool search, our tools, its shell."""

    def __init__(self, client):
        self.client = client

    def load_tools(self):
        if self.client == "codex":
            return {"tool": "tool_search", "args": {"query": "astra fix memory search store run tests", "limit": 20}}
        names = ",".join(f"mcp__astra__{t}" for t in OUR_TOOLS)
        return {"tool": "ToolSearch", "args": {"query": f"select:{names}"}}

    def ours(self, tool, args):
        if self.client == "codex":
            return {"tool": tool, "namespace": "mcp__astra", "args": args}
        return {"tool": f"mcp__astra__{tool}", "args": args}

    def shell(self, command):
        if self.client == "codex":
            return {"tool": "exec_command", "args": {"cmd": command, "yield_time_ms": 30000}}
        return {"tool": "Bash", "args": {"command": command, "description": "run a command"}}


# run_tests' confirmed_outcome, from our text (`confirmed_outcome: …`) or from our structuredContent as JSON
# (`"confirmed_outcome":"…"`, what Codex passes on instead of the text)
OUTCOME_RE = r'confirmed_outcome"?: ?"?([^"\n]+)'
OUTCOME = {"$from_last_result": OUTCOME_RE}


def session_one_moves(d):
    store = lambda outcome: d.ours("store_fix_memory", {"fix_description": ALPHA_FIX, "error_type": "AssertionError",
                                                        "file_paths": ALPHA_FILES, "outcome": outcome})
    reference = ROOT / "scripts" / "reference_fixes" / "scenario_alpha"
    return [
        d.load_tools(),
        store("not-a-confirmed-outcome"),                                   # 1: refused, no search yet
        d.ours("search_codebase_memory", {"query": ALPHA_QUERY, "error_type": None, "top_k": 3}),           # 2: empty store
        d.shell(TEST_COMMAND),                                              # 3: the tests fail
        d.shell(f"cp -r {reference}/. ."),                                  # 4: the edit
        d.ours("run_tests", {}),                                            # 5: passes
        d.shell("printf '\\n# reviewed\\n' >> webapp/config.py"),           # 6: another edit
        store(OUTCOME),                                                     # 7: refused, files changed
        d.ours("run_tests", {}),                                            # 8: passes again
        store(OUTCOME),                                                     # 9: stored
        {"text": "Fixed and remembered."},
    ]


def session_two_moves(d):
    symptoms = {"$from_last_result": r"^E\s+(AssertionError: .*)$", "all": True}
    return [
        d.load_tools(),
        d.shell(TEST_COMMAND),                                              # 1: beta's tests fail
        d.ours("search_codebase_memory", {"query": symptoms, "error_type": None, "top_k": 3}),              # 2: alpha's fix is Match 1
        {"text": "Found a remembered fix for this failure."},
    ]


# --- what the model got back ------------------------------------------------------------------------

def results_by_move(model):
    """{move index: the tool result the client carried back for the call that move made}."""
    out = {}
    calls = {r["call_id"]: r["move"] for r in model.main_requests() if r.get("call_id")}
    for request in model.main_requests():
        for result in tool_results(model.api, request["body"]):
            if result["id"] in calls:
                out.setdefault(calls[result["id"]], result)
    return out


def check_common(model, label, secrets):
    """No scripted-model problem; no secret in any request body; in headers only the model key, in its own
    header (`authorization` for the Responses API, `x-api-key` for the Messages API)."""
    errors = model.errors()
    check(not errors, f"{label}: the scripted model saw a problem", "\n".join(errors))
    key, key_header = (OPENAI_KEY, "authorization") if model.api == "openai" else (ANTHROPIC_KEY, "x-api-key")
    for request in model.requests:
        body = json.dumps(request["body"])
        for secret in secrets + [key, OTHER_SECRET]:
            check(secret not in body, f"{label}: a secret went into a model request body ({request['path']})")
            for header, value in request["headers"].items():
                check(secret not in value or (secret == key and header == key_header),
                      f"{label}: a secret went into the model request header {header}")
        check(key in request["headers"].get(key_header, ""), f"{label}: the model key is not in {key_header}")


def our_tool_specs(model):
    """Our tools as the client showed them to the model: {name: (description, schema)}."""
    specs = {}
    for request in model.main_requests():
        body = request["body"]
        tools = list(body.get("tools") or [])
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type") == "tool_search_output":
                tools += item.get("tools") or []
        for tool in tools:
            if tool.get("type") == "namespace" and tool.get("name") == "mcp__astra":
                for inner in tool.get("tools") or []:
                    specs[inner["name"]] = (inner.get("description"), inner.get("parameters"))
            elif str(tool.get("name", "")).startswith("mcp__astra__"):
                specs[tool["name"][len("mcp__astra__"):]] = (tool.get("description"), tool.get("input_schema"))
    return specs


def schema_report(model, label):
    specs = our_tool_specs(model)
    check(sorted(specs) == OUR_TOOLS, f"{label}: the client listed {sorted(specs)}, not our tools {OUR_TOOLS}")
    rewritten = {}
    for name, (description, schema) in specs.items():
        ours = SCHEMAS[name]
        check(description and description.startswith(ours["description"][:60]),
              f"{label}: {name}'s description reached the model changed", str(description))
        if schema != ours["inputSchema"]:
            rewritten[name] = schema_diff(ours["inputSchema"], schema)
    dropped, other = set(), []
    for name, diff in rewritten.items():
        for path, (mine, theirs) in diff.items():
            if theirs == "<absent>" and path.rsplit("/", 1)[-1] in LENGTH_AND_RANGE:
                dropped.add(path.rsplit("/", 1)[-1])
            else:
                other.append(f"{name}{path}: {json.dumps(mine)} -> {json.dumps(theirs)}")
    return {"dropped_keywords": sorted(dropped), "other_changes": other, "tools_changed": sorted(rewritten)}


# the JSON Schema validation keywords Codex leaves out of the schemas it shows the model, and the
# optional properties' `default` (what null means), which a client may leave out too
LENGTH_AND_RANGE = {"minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems", "default"}


def schema_diff(ours, theirs, path=""):
    """Paths where the client's schema differs from ours: {path: [ours, theirs]}."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = {}
        for key in sorted(set(ours) | set(theirs)):
            out.update(schema_diff(ours.get(key, "<absent>"), theirs.get(key, "<absent>"), f"{path}/{key}"))
        return out
    return {} if ours == theirs else {path or "/": [ours, theirs]}


def text_of(results, move):
    check(move in results, f"no tool result came back to the model for move {move}", json.dumps(results)[:2000])
    return results[move]["text"]


def structured(text):
    """Our structuredContent when the client passed it on as JSON instead of our text (Codex does, after its
    `Wall time: … Output:` header), else None."""
    body = text.split("Output:\n", 1)[1] if text.startswith("Wall time:") and "Output:\n" in text else text
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def outcome_in(text):
    found = re.search(OUTCOME_RE, text)
    return found.group(1) if found else None


def check_session_one(model, label):
    """The checks of session 1; returns what later checks need."""
    r = results_by_move(model)
    mains = model.main_requests()
    check(mains[-1].get("move") == len(model.moves) - 1, f"{label}: the turn stopped before the script's end",
          f"last move answered: {mains[-1].get('move')} of {len(model.moves) - 1}")
    refused = text_of(r, 1)
    check("memory gate: call search_codebase_memory" in refused, f"{label}: store before search not refused", refused)
    empty = text_of(r, 2)
    check(empty.strip().endswith("No relevant confirmed fixes found.") or (structured(empty) or {}).get("matches") == [],
          f"{label}: the empty search", empty)
    check("4 failed" in text_of(r, 3), f"{label}: the client's shell ran the failing tests", text_of(r, 3)[-1500:])
    first = outcome_in(text_of(r, 5))
    check(first is not None, f"{label}: run_tests after the fix returned no confirmed_outcome", text_of(r, 5))
    changed = text_of(r, 7)
    check("workspace gate: files changed since the tests passed" in changed,
          f"{label}: store after an edit without a new passing run not refused", changed)
    check(any(q.get("move") == 7 and q["sent_args"]["outcome"] == first for q in mains),
          f"{label}: the refused store did not carry the first confirmed_outcome")
    second = outcome_in(text_of(r, 8))
    check(second and second != first, f"{label}: a new passing run issues a new confirmed_outcome", text_of(r, 8))
    done = text_of(r, 9)
    stored = re.search(r"Stored fix memory (\S+) \(project ([^,]+), files: webapp/config.py\), verified", done)
    as_json = structured(done) or {}
    memory_id = stored.group(1) if stored else as_json.get("memory_id")
    check(memory_id and (stored or (as_json.get("created") is True and as_json.get("verified") is True)),
          f"{label}: the fix was not stored", done)
    flags = {m: r[m]["is_error"] for m in (1, 7, 9)}
    return {"memory_id": memory_id, "refusal_search_first": refused.strip()[:300],
            "refusal_files_changed": changed.strip()[:300], "confirmed_outcome": second, "is_error": flags,
            "structured_results": structured(text_of(r, 8)) is not None,
            "tool_results": {m: r[m]["text"][:300] for m in sorted(r)}}


def check_session_two(model, label, memory_id):
    r = results_by_move(model)
    mains = model.main_requests()
    check(mains[-1].get("move") == len(model.moves) - 1, f"{label}: the turn stopped before the script's end")
    check("4 failed" in text_of(r, 1), f"{label}: beta's tests failed in the client's shell", text_of(r, 1)[-1500:])
    query = next(q["sent_args"]["query"] for q in mains if q.get("move") == 2)
    check(query.count("AssertionError: assert") >= 3, f"{label}: the search carried the failure it saw", query)
    found = text_of(r, 2)
    as_json = structured(found)
    if as_json is not None:
        matches = as_json.get("matches") or []
        check(matches, f"{label}: no match came back", found)
        first = matches[0]
        check(first.get("memory_id") == memory_id and first.get("fix_description", "").startswith(ALPHA_FIX[:80]),
              f"{label}: the first match is not alpha's fix", found)
        return {"query": query[:300], "match_1": f"Match 1 (fused_score={first['fused_score']:.4f}, cosine={first['score']:.4f})",
                "match_1_text": f"Fix: {first['fix_description']}\nFiles: {', '.join(first['file_paths'])}",
                "memory_id_seen": True, "as": "structuredContent"}
    block = found[found.find("Match 1 (fused_score="):]
    check("Match 1 (fused_score=" in found, f"{label}: no Match 1 came back", found)
    check(f"Fix: {ALPHA_FIX[:80]}" in block.split("Match 2")[0], f"{label}: Match 1 is not alpha's fix", found)
    return {"query": query[:300], "match_1": block.split("\n")[0], "match_1_text": block.split("Match 2")[0][:1200],
            "memory_id_seen": memory_id in found, "as": "text"}


# --- transcripts --------------------------------------------------------------------------------------

def import_and_search(binary, db, files, query, project):
    done = subprocess.run([str(binary), "sessions", "import", "--db", str(db), "--actor", ACTOR, "--project", project,
                           *map(str, files)], capture_output=True, text=True, env=clean_env(ASTRA_LOG="warn"),
                          timeout=120)
    check(done.returncode == 0, f"sessions import of {files} failed", done.stdout + done.stderr)
    return done.stdout.strip(), asyncio.run(conversation_search(binary, db, query))


async def conversation_search(binary, db, query):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    params = StdioServerParameters(command=str(binary), args=["serve", "--stdio", "--db", str(db), "--actor", ACTOR],
                                   env=clean_env(ASTRA_LOG="warn"))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("conversation_search", {"query": query, "roles": None, "top_k": 10,
                                                                     "start": None, "end": None})
            check(not result.is_error, "conversation_search failed", str(result.content))
            return result.structured_content["results"]


def session_files(root, pattern):
    return sorted(p for p in root.rglob(pattern) if p.is_file())


# --- jobs ---------------------------------------------------------------------------------------------

def copy_scenario(work, name, tag):
    dest = work / f"{tag}-{name}"
    shutil.copytree(ROOT / "demo_projects" / name, dest)
    return dest


def codex_stdio_block(binary, workspace, db):
    config = tomllib.loads(docs_block("codex-stdio"))
    server = fill(config["mcp_servers"]["astra"], places(binary, workspace))
    server.setdefault("env", {}).update(server_env(db))
    return "[mcp_servers.astra]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in server.items())


def claude_stdio_config(binary, workspace, db):
    config = fill(json.loads(docs_block("claude-code-stdio")), places(binary, workspace))
    config["mcpServers"]["astra"].setdefault("env", {}).update(server_env(db))
    return config


def job_codex(binary, work):
    db = work / "store"
    d = Dialect("codex")
    alpha = copy_scenario(work, "scenario_alpha", "codex")
    one = run_codex(work, "codex-1", alpha, session_one_moves(d), codex_stdio_block(binary, alpha, db))
    beta = copy_scenario(work, "scenario_beta", "codex")
    two = run_codex(work, "codex-2", beta, session_two_moves(d), codex_stdio_block(binary, beta, db))
    summary = {"client": "codex"}
    for model, label in ((one, "codex session 1"), (two, "codex session 2")):
        check_common(model, label, [ANTHROPIC_KEY])
    summary["schemas_rewritten"] = schema_report(one, "codex")
    summary["session_1"] = check_session_one(one, "codex session 1")
    summary["session_2"] = check_session_two(two, "codex session 2", summary["session_1"]["memory_id"])

    # across clients and over HTTP: Claude Code on beta, on the store Codex wrote, through `serve --http`
    # with a bearer token, configured from docs/clients.md
    beta2 = copy_scenario(work, "scenario_beta", "claude-http")
    tokens = work / "astra-config.toml"
    tokens.write_text(f'[[tokens]]\ntoken = "{HTTP_TOKEN}"\nactor_id = "{ACTOR}"\n')
    server = subprocess.Popen([str(binary), "serve", "--http", "127.0.0.1:0", "--db", str(db), "--config", str(tokens),
                               "--workspace", str(beta2), "--test-command", TEST_COMMAND],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=clean_env(ASTRA_LOG="warn"))
    try:
        url = server.stdout.readline().strip()
        check(url.startswith("http://127.0.0.1:"), f"serve --http printed {url!r}")
        config = fill(json.loads(docs_block("claude-code-http")), places(binary, beta2, url))
        three = run_claude(work, "claude-http", beta2, session_two_moves(Dialect("claude")), config,
                           extra_env={"ASTRA_TOKEN": HTTP_TOKEN})
        block = fill(docs_block("codex-http"), places(binary, beta2, url))
        four = run_codex(work, "codex-http", beta2, session_two_moves(d), block, extra_env={"ASTRA_TOKEN": HTTP_TOKEN})
    finally:
        server.terminate()
        server.wait(timeout=30)
    check_common(three, "claude over http", [OPENAI_KEY, HTTP_TOKEN])
    summary["cross_http"] = check_session_two(three, "claude over http", summary["session_1"]["memory_id"])
    check_common(four, "codex over http", [ANTHROPIC_KEY, HTTP_TOKEN])
    summary["codex_http"] = check_session_two(four, "codex over http", summary["session_1"]["memory_id"])

    # the session files Codex wrote, imported and found
    files = session_files(work / "codex-home-codex-1" / "sessions", "*.jsonl")
    check(len(files) == 1, "codex session 1 wrote one rollout file", str(files))
    imported, hits = import_and_search(binary, db, files, "Fixed and remembered.", "codex-transcripts")
    summary["transcript"] = transcript_summary(files[0], imported, hits, "codex", "Fixed and remembered.")
    return summary


def job_claude(binary, work):
    db = work / "store"
    d = Dialect("claude")
    alpha = copy_scenario(work, "scenario_alpha", "claude")
    one = run_claude(work, "claude-1", alpha, session_one_moves(d), claude_stdio_config(binary, alpha, db))
    beta = copy_scenario(work, "scenario_beta", "claude")
    two = run_claude(work, "claude-2", beta, session_two_moves(d), claude_stdio_config(binary, beta, db))
    summary = {"client": "claude-code"}
    for model, label in ((one, "claude session 1"), (two, "claude session 2")):
        check_common(model, label, [OPENAI_KEY])
    summary["schemas_rewritten"] = schema_report(one, "claude code")
    summary["side_requests"] = sorted({f"{r['path'].split('?')[0]} {(r['body'] or {}).get('model', '')}"
                                       for r in one.requests if r["kind"] == "side"})
    summary["session_1"] = check_session_one(one, "claude session 1")
    summary["session_2"] = check_session_two(two, "claude session 2", summary["session_1"]["memory_id"])
    files = session_files(work / "claude-config-claude-1" / "projects", "*.jsonl")
    check(len(files) >= 1, "claude session 1 wrote a session file", str(files))
    imported, hits = import_and_search(binary, db, files, "Fixed and remembered.", "claude-transcripts")
    summary["transcript"] = transcript_summary(files[0], imported, hits, "claude-code", "Fixed and remembered.")
    return summary


def transcript_summary(path, imported, hits, source, text):
    mine = [h for h in hits if h["source"] == source]
    check(mine, f"conversation_search found no {source} item after the import", json.dumps(hits)[:2000])
    said = [h for h in mine if h["role"] == "assistant" and text in h["text"]]
    check(said, f"the {source} transcript's final answer is not found", json.dumps(mine)[:2000])
    tools = [h for h in mine if h["role"] == "tool"]
    return {"file": path.name, "import": imported.splitlines()[0] if imported else "", "hit": said[0]["text"][:200],
            "session_id": said[0]["session_id"], "sources": sorted({h["source"] for h in hits}),
            "tool_items": len(tools)}


def main():
    job, binary, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    work.mkdir(parents=True, exist_ok=True)
    jobs = {"codex": job_codex, "claude": job_claude}
    try:
        summary = jobs[job](binary, work)
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        print(json.dumps({"ok": False, "error": str(e)[:4000]}))
        return 1
    summary["ok"] = True
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
