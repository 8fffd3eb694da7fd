#!/usr/bin/env python3
"""A scripted model on loopback for driving real agent clients (Codex CLI, Claude Code) in tests.

The scripted model decides nothing by itself. A script is a fixed list of the model's moves; each request
the client sends for its main turn gets the next move, whatever the request holds. The tests then assert
on what the client sent (the recorded requests): which tools it advertised, what came back as each tool
result. What these tests prove is the client/server integration, never a model's skill.

Two APIs, each with streaming (SSE) answers, as the clients send them:
  - `openai`:    the OpenAI Responses API, `POST .../responses` (Codex CLI, `wire_api = "responses"`).
  - `anthropic`: the Anthropic Messages API, `POST .../v1/messages` (Claude Code, `ANTHROPIC_BASE_URL`),
                 plus `POST .../v1/messages/count_tokens`.

A move is a JSON object, one of:
  {"tool": NAME, "args": {...}}                      call the tool NAME, as the client advertised it
  {"tool": NAME, "namespace": NS, "args": {...}}     (openai) a tool inside a `namespace` tool (Codex lists
                                                     an MCP server's tools as namespace `mcp__<server>`)
  {"tool": "tool_search", "args": {"query": Q}}      (openai) a `tool_search_call` item, when the request
                                                     offers a tool of type `tool_search` (Codex defers MCP
                                                     tools behind it; its `tool_search_output` then counts
                                                     as advertising the tools it returned)
  {"text": "..."}                                    answer with text; this ends the client's turn
A tool move may carry "id" (the call id; default `call_N` / `toolu_N`). An argument value
{"$from_last_result": REGEX} is replaced by what REGEX finds in the tool results the request carries,
newest first: its first match (group 1 when it has a group), or with "all": true every match of the newest
result that has one, joined by "join" (default "; "). This is how a script passes on a value only the
client's tool results hold (run_tests' `confirmed_outcome`, the assertion lines a test run printed): the
server copies text it was sent, it does not choose. Nothing found: the record says "error". Before answering with a tool move
the server checks that the request advertised that tool (a top-level tool named NAME, or for openai a
namespace NS holding NAME; for anthropic a tool deferred behind ToolSearch counts once a request lists it);
when it did not, the answer is a text "scripted model: tool NAME was not advertised" and the record says
"error", so the test fails on the recording rather than on a hang.

Which requests consume the script ("main" requests): those that list tools and, when `main_model` is set,
name a model that contains it. Everything else is a side request (Claude Code's title generation, quota
check, haiku-model calls; count_tokens) and gets a short text answer ("ok") without consuming a move. A
main request after the script ran out gets the text "scripted model: script exhausted" and the record says
"error".

Every request is recorded (method, path, headers, parsed JSON body, kind "main"/"side", the move index it
consumed as "move", the arguments and call id sent as "sent_args" and "call_id", and any "error") and the whole list is rewritten to the record file after each request, so a test
can read it once the client exited.

Use from Python (in-process, a thread):
    from scripted_model import ScriptedModel, tool_results
    with ScriptedModel("anthropic", moves, record="/tmp/requests.json") as model:
        ... run the client with ANTHROPIC_BASE_URL=model.url ...
        model.requests          # the records so far (list of dicts)
        tool_results("anthropic", model.main_requests()[-1]["body"])

Use from anything else (a process):
    python3 scripted_model.py anthropic --script moves.json --record requests.json [--main-model M]
prints the base URL (`http://127.0.0.1:PORT`) as its first stdout line, then serves until stdin closes
or SIGTERM. For Codex use base_url = URL + "/v1"; for Claude Code ANTHROPIC_BASE_URL = URL.
"""

import argparse
import itertools
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

APIS = ("openai", "anthropic")


class ScriptedModel:
    """A scripted model server on 127.0.0.1 (a free port). `url` is `http://127.0.0.1:PORT`."""

    def __init__(self, api, moves, record=None, main_model=None):
        if api not in APIS:
            raise ValueError(f"api must be one of {APIS}, not {api!r}")
        self.api = api
        self.moves = list(moves)
        self.record = record
        self.main_model = main_model
        self.requests = []
        self.next_move = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                model._handle(self, None)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                model._handle(self, raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def main_requests(self):
        return [r for r in self.requests if r["kind"] == "main"]

    def errors(self):
        return [r["error"] for r in self.requests if r.get("error")]

    # --- dispatch ---------------------------------------------------------------------------------

    def _handle(self, handler, raw):
        path = handler.path
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        entry = {
            "method": handler.command,
            "path": path,
            "headers": {k.lower(): v for k, v in handler.headers.items()},
            "body": body,
            "kind": "side",
        }
        with self._lock:
            entry["index"] = len(self.requests)
            self.requests.append(entry)
            move = None
            if handler.command == "POST" and self._is_main(path, body):
                entry["kind"] = "main"
                if self.next_move < len(self.moves):
                    move = self.moves[self.next_move]
                    entry["move"] = self.next_move
                    self.next_move += 1
                    missing = self._not_advertised(move, body)
                    if missing:
                        entry["error"] = f"scripted model: tool {missing} was not advertised"
                        move = {"text": entry["error"]}
                    elif "args" in move:
                        try:
                            move = dict(move, args=_resolve(move["args"], tool_results(self.api, body)))
                        except LookupError as e:
                            entry["error"] = f"scripted model: no tool result matches {e}"
                            move = {"text": entry["error"]}
                        entry["sent_args"] = move.get("args")
                else:
                    entry["error"] = "scripted model: script exhausted"
                    move = {"text": entry["error"]}
            n = next(self._ids)
            if move is not None and "tool" in move:
                move = dict(move, id=move.get("id") or (f"call_{n}" if self.api == "openai" else f"toolu_{n:04d}"))
                entry["call_id"] = move["id"]
            self._save()
        if handler.command == "GET":
            # Codex asks for the model list at start; an empty list makes it keep its configured model.
            return _send_json(handler, 200, {"object": "list", "data": [], "models": []})
        if path.split("?")[0].endswith("/count_tokens"):
            return _send_json(handler, 200, {"input_tokens": 1})
        if move is None:
            move = {"text": "ok"}
        stream = bool((body or {}).get("stream"))
        if self.api == "openai":
            return _send_openai(handler, move, n, stream)
        return _send_anthropic(handler, move, n, stream, (body or {}).get("model", "scripted"))

    def _is_main(self, path, body):
        if not isinstance(body, dict) or path.split("?")[0].endswith("/count_tokens"):
            return False
        if not body.get("tools"):
            return False
        return self.main_model is None or self.main_model in str(body.get("model", ""))

    def _not_advertised(self, move, body):
        """The name of the move's tool when the request did not advertise it, else None."""
        if "tool" not in move:
            return None
        names = advertised_tools(self.api, body)
        want = f"{move['namespace']}.{move['tool']}" if move.get("namespace") else move["tool"]
        return None if want in names else want

    def _save(self):
        if self.record:
            tmp = f"{self.record}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.requests, f, indent=1)
            os.replace(tmp, self.record)


# --- what a request holds ---------------------------------------------------------------------------

def advertised_tools(api, body):
    """The tool names a request offers the model: `name`, and `namespace.name` for a namespace's tools
    (openai). For anthropic, tools marked `defer_loading` count too: the client lists them so the model can
    load them, and a call to one the client has not loaded yet is the client's business to refuse."""
    names = set()
    tools = list((body or {}).get("tools") or [])
    for item in (body or {}).get("input") or []:
        if isinstance(item, dict) and item.get("type") == "tool_search_output":
            tools += item.get("tools") or []
    for tool in tools:
        name = tool.get("name") or tool.get("type")
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                names.add(f"{name}.{inner.get('name')}")
        if name:
            names.add(name)
    return names


def tool_results(api, body):
    """The tool results a request carries back to the model, in order: a list of
    {"id": call id, "text": the result as text, "is_error": bool or None}."""
    out = []
    if api == "openai":
        for item in (body or {}).get("input") or []:
            kind = item.get("type")
            if kind in ("function_call_output", "custom_tool_call_output", "mcp_tool_call_output"):
                out.append({"id": item.get("call_id"), "text": _text(item.get("output")), "is_error": None})
            elif kind == "tool_search_output":
                out.append({"id": item.get("call_id"), "text": json.dumps(item.get("tools")), "is_error": None})
        return out
    for message in (body or {}).get("messages") or []:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_result":
                out.append({"id": block.get("tool_use_id"), "text": _text(block.get("content")),
                            "is_error": block.get("is_error")})
    return out


def _resolve(value, results):
    """`value` with each {"$from_last_result": REGEX} replaced from `results` (see the module doc)."""
    if isinstance(value, dict) and "$from_last_result" in value:
        pattern = re.compile(value["$from_last_result"], re.M)
        for result in reversed(results):
            found = pattern.findall(result["text"])
            if found:
                return value.get("join", "; ").join(found) if value.get("all") else found[0]
        raise LookupError(value["$from_last_result"])
    if isinstance(value, dict):
        return {k: _resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, results) for v in value]
    return value


def _text(value):
    """The text of a tool output: a string, a list of text parts, or an object with `content`/`output`."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(part) for part in value)
    if isinstance(value, dict):
        if "text" in value:
            return str(value["text"])
        for key in ("content", "output", "body"):
            if key in value:
                return _text(value[key])
    return json.dumps(value)


# --- answers ----------------------------------------------------------------------------------------

def _send_json(handler, status, value):
    data = json.dumps(value).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _send_sse(handler, events):
    data = "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n" for name, payload in events).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _send_openai(handler, move, n, stream):
    rid = f"resp_{n}"
    if move.get("tool") == "tool_search":
        item = {"type": "tool_search_call", "id": f"ts_{n}", "call_id": move.get("id", f"call_{n}"),
                "execution": "client", "status": "completed", "arguments": move.get("args", {})}
    elif "tool" in move:
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": move.get("id", f"call_{n}"),
                "name": move["tool"], "arguments": json.dumps(move.get("args", {}))}
        if move.get("namespace"):
            item["namespace"] = move["namespace"]
    else:
        item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": move["text"], "annotations": []}]}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}
    response = {"id": rid, "object": "response", "status": "completed", "output": [item], "usage": usage}
    if not stream:
        return _send_json(handler, 200, response)
    events = [("response.created", {"type": "response.created",
                                    "response": {"id": rid, "object": "response", "status": "in_progress"}}),
              ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                              "item": item})]
    if "text" in move:
        events.append(("response.output_text.delta", {"type": "response.output_text.delta", "output_index": 0,
                                                      "content_index": 0, "item_id": item["id"],
                                                      "delta": move["text"]}))
    events += [("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                              "item": item}),
               ("response.completed", {"type": "response.completed", "response": response})]
    _send_sse(handler, events)


def _send_anthropic(handler, move, n, stream, model):
    if "tool" in move:
        block = {"type": "tool_use", "id": move.get("id", f"toolu_{n:04d}"), "name": move["tool"],
                 "input": move.get("args", {})}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": move["text"]}
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 10, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant", "model": model,
               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not stream:
        return _send_json(handler, 200, message)
    start = dict(message, content=[], stop_reason=None)
    if block["type"] == "tool_use":
        first = dict(block, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        first = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    _send_sse(handler, [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": first}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 10}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("api", choices=APIS)
    parser.add_argument("--script", required=True, help="JSON file: a list of moves")
    parser.add_argument("--record", required=True, help="JSON file the requests are written to")
    parser.add_argument("--main-model", help="only requests naming a model containing this consume moves")
    args = parser.parse_args()
    with open(args.script) as f:
        moves = json.load(f)
    with ScriptedModel(args.api, moves, record=args.record, main_model=args.main_model) as model:
        print(model.url, flush=True)
        try:
            sys.stdin.read()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
