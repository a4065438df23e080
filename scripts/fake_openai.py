#!/usr/bin/env python3
"""A small fake of OpenAI's streaming Responses API, for driving the real Codex in tests.

    fake_openai.py --port-file F --record R.jsonl [--command CMD | --call 'TOOL JSON']... [--final TEXT]

Listens on 127.0.0.1 (a free port, written to --port-file once listening); Codex reaches it as
a custom model provider (`base_url = "http://127.0.0.1:PORT/v1"`, `wire_api = "responses"`).
The Nth POST /v1/responses of a conversation (N = the function calls its input already holds)
is answered with the Nth of the --command (a call of Codex's shell tool, exec_command) and
--call (any function, with its arguments as JSON) in the order given, and once they are used
up, a text answer (--final). Every such request is appended to --record as one JSON line:
{"turn": N, "tool_results": [text, ...], "body": the request}, the output of every call so far
in order, so that a test can read what Codex sent back as each command's result. Anything
else gets a 404. Python's standard library only.
"""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sse(events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def completed(response_id):
    usage = {
        "input_tokens": 10,
        "input_tokens_details": None,
        "output_tokens": 5,
        "output_tokens_details": None,
        "total_tokens": 15,
    }
    return {"type": "response.completed", "response": {"id": response_id, "usage": usage}}


def tool_results(body):
    """The output of each function call of the conversation, in order."""
    return [
        item.get("output") if isinstance(item.get("output"), str) else json.dumps(item.get("output"))
        for item in body.get("input") or []
        if item.get("type") == "function_call_output"
    ]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake_openai: " + (fmt % args) + "\n")

    def send(self, status, content_type, payload):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self.send(404, "application/json", b'{"error":{"message":"not in the fake","type":"not_found"}}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.split("?")[0].endswith("/responses"):
            self.do_GET()
            return
        self.send(200, "text/event-stream", sse(self.server.script.answer(body)))


class Script:
    def __init__(self, calls, final, record):
        self.calls = calls
        self.final = final
        self.record = record
        self.lock = threading.Lock()

    def answer(self, body):
        turn = sum(1 for item in body.get("input") or [] if item.get("type") == "function_call")
        with self.lock, open(self.record, "a", encoding="utf-8") as out:
            out.write(json.dumps({"turn": turn, "tool_results": tool_results(body), "body": body}) + "\n")
        response_id = f"resp_fake_{turn}"
        if turn < len(self.calls):
            name, arguments = self.calls[turn]
            item = {
                "type": "function_call",
                "call_id": f"call_fake_{turn}",
                "name": name,
                "arguments": json.dumps(arguments),
            }
        else:
            item = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_fake_{turn}",
                "content": [{"type": "output_text", "text": self.final}],
            }
        return [
            {"type": "response.created", "response": {"id": response_id}},
            {"type": "response.output_item.done", "item": item},
            completed(response_id),
        ]


class ShellCall(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, getattr(namespace, self.dest) + [("exec_command", {"cmd": value})])


class AnyCall(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        name, _, arguments = value.partition(" ")
        setattr(namespace, self.dest, getattr(namespace, self.dest) + [(name, json.loads(arguments or "{}"))])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--command", action=ShellCall, dest="calls", default=[])
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
