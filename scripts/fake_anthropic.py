#!/usr/bin/env python3
"""A small fake of Anthropic's streaming Messages API, for driving the real Claude Code in tests.

    fake_anthropic.py --port-file F --record R.jsonl [--command CMD | --call 'TOOL JSON']... [--final TEXT]

Listens on 127.0.0.1 (a free port, written to --port-file once listening). A request of the
agent's conversation (one that offers the Bash tool) is answered by the script: the Nth such
turn of a conversation (N = the tool calls it already holds) is a tool_use of Bash with
the Nth of the --command (a Bash call) and --call (any tool, with its input as JSON) in the
order given, and once they are used up, a text answer (--final). Every such request is appended
to --record as one JSON line: {"turn": N, "tool_results": [{"text", "is_error"}, ...], "body":
the request}, the results of every call so far in order, so that a test can read what Claude
Code sent back as each command's result.
Claude Code's side requests (titles, summaries: no Bash tool offered) get a short text answer,
count_tokens a count; anything else a 404. Python's standard library only.
"""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "claude-fake-1"


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream(blocks, stop_reason):
    """The SSE events of one assistant message made of `blocks` (each already complete)."""
    out = [
        sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        out.append(sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
    )
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def offers_bash(body):
    return any(tool.get("name") == "Bash" for tool in body.get("tools") or [])


def tool_results(body):
    """The text of each tool_result of the conversation, in order."""
    parts = [
        part
        for message in body.get("messages") or []
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for part in message["content"]
    ]
    texts = []
    for part in parts:
        if part.get("type") != "tool_result":
            continue
        content = part.get("content")
        if isinstance(content, list):
            content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
        texts.append({"text": content or "", "is_error": bool(part.get("is_error"))})
    return texts


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake_anthropic: " + (fmt % args) + "\n")

    def send(self, status, content_type, payload):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self.send(404, "application/json", b'{"type":"error","error":{"type":"not_found_error","message":"fake"}}')

    do_HEAD = do_GET

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            self.send(200, "application/json", b'{"input_tokens": 10}')
            return
        if not path.endswith("/v1/messages"):
            self.do_GET()
            return
        if offers_bash(body):
            blocks, stop = self.server.script.answer(body)
        else:
            blocks, stop = [{"type": "text", "text": "Fake title"}], "end_turn"
        if body.get("stream"):
            self.send(200, "text/event-stream", stream(blocks, stop))
        else:
            message = {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
            self.send(200, "application/json", json.dumps(message).encode())


class Script:
    def __init__(self, calls, final, record):
        self.calls = calls
        self.final = final
        self.record = record
        self.lock = threading.Lock()

    def answer(self, body):
        # Claude Code merges consecutive assistant messages into one: the turn is the number of
        # tool calls the conversation already holds, not the number of assistant messages.
        turn = sum(
            1
            for message in body.get("messages") or []
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "tool_use"
        )
        with self.lock, open(self.record, "a", encoding="utf-8") as out:
            out.write(json.dumps({"turn": turn, "tool_results": tool_results(body), "body": body}) + "\n")
        if turn < len(self.calls):
            name, tool_input = self.calls[turn]
            call = {"type": "tool_use", "id": f"toolu_fake_{turn}", "name": name, "input": tool_input}
            return [call], "tool_use"
        return [{"type": "text", "text": self.final}], "end_turn"


class BashCall(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        call = ("Bash", {"command": value, "description": "a scripted command"})
        setattr(namespace, self.dest, getattr(namespace, self.dest) + [call])


class AnyCall(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        name, _, tool_input = value.partition(" ")
        setattr(namespace, self.dest, getattr(namespace, self.dest) + [(name, json.loads(tool_input or "{}"))])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--command", action=BashCall, dest="calls", default=[])
    parser.add_argument("--call", action=AnyCall, dest="calls", default=[])
    parser.add_argument("--final", default="All done.")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.script = Script(args.calls, args.final, args.record)
    with open(args.port_file + ".tmp", "w", encoding="utf-8") as out:
        out.write(str(server.server_address[1]))
    # Renamed into place: a reader never sees a half-written port.
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
