#!/usr/bin/env node
// Interop check with the official MCP TypeScript SDK (pinned in tests/interop/package.json) as the client,
// over stdio, streamable HTTP or legacy SSE: initialize, tools/list, archival insert + search (the inserted
// passage must come back first), search_codebase_memory, resources/list, prompts/get core_memory. The SDK
// validates every structuredContent against the tool's outputSchema. Prints one JSON object with what it
// saw as the last stdout line; exits 1 on the first mismatch.
//
// Usage: node ts_client.mjs stdio BINARY DB_DIR   (spawns `BINARY serve --db DB_DIR`)
//        node ts_client.mjs http  http://127.0.0.1:PORT/mcp
//        node ts_client.mjs sse   http://127.0.0.1:PORT/sse
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";

const EXPECTED_TOOLS = ["search_codebase_memory", "archival_memory_insert", "archival_memory_search"];
// A sentence no other test stores, so the search has one right answer even on a shared store.
const PASSAGE = "Interop note from the TypeScript SDK: the amber lighthouse keeper logs tide tables in octal.";
const QUERY = "amber lighthouse keeper tide tables octal";

function fail(message) {
  console.error(`ts_client: FAILED: ${message}`);
  console.log(JSON.stringify({ ok: false, failed: message }));
  process.exit(1);
}

function check(condition, message) {
  if (!condition) fail(message);
}

const textOf = (result) => result.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");

function transportFor(mode, args) {
  if (mode === "stdio" && args.length === 2) {
    const [binary, db] = args;
    // The SDK passes the child only a short default environment: hand it ours (model/runtime paths).
    return new StdioClientTransport({ command: binary, args: ["serve", "--db", db], env: { ...process.env } });
  }
  if (mode === "http" && args.length === 1) return new StreamableHTTPClientTransport(new URL(args[0]));
  if (mode === "sse" && args.length === 1) return new SSEClientTransport(new URL(args[0]));
  console.error("usage: ts_client.mjs stdio BINARY DB_DIR | http URL_OF_/mcp | sse URL_OF_/sse");
  process.exit(2);
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  const transport = transportFor(mode, args);
  // A hung server must not hang CI.
  setTimeout(() => fail("timed out after 120 s"), 120_000).unref();

  const client = new Client({ name: "astra-mcp-ts-interop", version: "1.0.0" });
  const seen = { transport: mode };
  await client.connect(transport); // initialize + notifications/initialized
  try {
    const server = client.getServerVersion();
    seen.server = server?.name;
    check(seen.server === "astra-mcp", `server name is astra-mcp (got ${JSON.stringify(server)})`);
    if (mode === "http") {
      seen.protocol_version = transport.protocolVersion;
      seen.session = Boolean(transport.sessionId);
    }
    const caps = client.getServerCapabilities() ?? {};
    check(caps.tools && caps.resources && caps.prompts, `tools/resources/prompts capabilities (got ${JSON.stringify(caps)})`);

    const tools = (await client.listTools()).tools;
    seen.tools = tools.map((t) => t.name);
    for (const name of EXPECTED_TOOLS) check(seen.tools.includes(name), `tools/list has ${name}`);
    for (const tool of tools) {
      check(tool.inputSchema.additionalProperties === false, `${tool.name}: strict input schema`);
      check(tool.outputSchema, `${tool.name}: output schema`);
    }

    const inserted = await client.callTool({ name: "archival_memory_insert", arguments: { text: PASSAGE, tags: ["interop"] } });
    check(!inserted.isError, `archival_memory_insert succeeds: ${textOf(inserted)}`);
    const id = inserted.structuredContent?.id;
    check(typeof id === "string" && id.length > 0, "archival_memory_insert returns an id");

    const hits = await client.callTool({
      name: "archival_memory_search",
      arguments: { query: QUERY, tags: null, top_k: 3, start: null, end: null },
    });
    check(!hits.isError, `archival_memory_search succeeds: ${textOf(hits)}`);
    const first = hits.structuredContent?.results?.[0];
    check(first?.id === id && first?.text === PASSAGE, `the inserted passage is result 1 (got ${JSON.stringify(first)})`);
    seen.archival_first_line = textOf(hits).split("\n")[0];
    check(seen.archival_first_line.startsWith("Result 1 (fused_score="), `result text starts with "Result 1" (got ${seen.archival_first_line})`);

    const fixes = await client.callTool({
      name: "search_codebase_memory",
      arguments: { query: "second allowed origin rejected", error_type: null, top_k: 3 },
    });
    check(!fixes.isError && Array.isArray(fixes.structuredContent?.matches), `search_codebase_memory succeeds: ${textOf(fixes)}`);
    seen.fix_search_first_line = textOf(fixes).split("\n")[0];

    const resources = (await client.listResources()).resources;
    seen.resources = resources.map((r) => r.uri);
    for (const section of ["persona", "human", "project"])
      check(seen.resources.includes(`memory://core/${section}`), `resources/list has memory://core/${section}`);

    const prompt = await client.getPrompt({ name: "core_memory" });
    const promptText = prompt.messages?.[0]?.content?.text ?? "";
    check(promptText.includes("<project"), `prompts/get core_memory renders the project block (got ${JSON.stringify(promptText)})`);
    seen.prompt_messages = prompt.messages.length;
    // Streamable HTTP: end the session with DELETE /mcp (a 405 answer is allowed and accepted by the SDK).
    if (mode === "http") await transport.terminateSession();
  } catch (error) {
    fail(`${error?.name ?? "Error"}: ${error?.message ?? error}`);
  } finally {
    await client.close();
  }
  console.log(JSON.stringify({ ok: true, ...seen }));
}

main().catch((error) => fail(`${error?.name ?? "Error"}: ${error?.message ?? error}`));
