"""An OTLP/HTTP logs receiver for scripts/test-otlp.sh: it decodes every request with the official
messages (opentelemetry-proto from PyPI, ExportLogsServiceRequest) and keeps what it took.

    otlp_receiver.py --port P --records FILE --meta FILE [--fail N] [--token T]

- answers 503 (Retry-After: 1) to its first N requests, keeping nothing of them (--fail);
- answers 401 to a request without `Authorization: Bearer T` (--token), 415 to one that is not
  application/x-protobuf, 400 to one that does not decode;
- else appends each log record's body (the audit record's stored line) to --records, and a JSON
  line of what came beside it (its attributes, severity, event name, the resource) to --meta, in
  the order received, then answers 200 with an empty ExportLogsServiceResponse;
- writes one line per request to stdout: the status it answered and the seqs it carried.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(key_values):
    return {kv.key: value_of(kv.value) for kv in key_values}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--meta", required=True)
    parser.add_argument("--fail", type=int, default=0)
    parser.add_argument("--token")
    args = parser.parse_args()
    lock = threading.Lock()
    state = {"to_fail": args.fail}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def answer(self, status, body=b"", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def say(self, status, seqs):
            print(json.dumps({"status": status, "seqs": seqs}), flush=True)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/logs":
                return self.answer(404)
            if args.token and self.headers.get("Authorization") != f"Bearer {args.token}":
                self.say(401, [])
                return self.answer(401)
            if self.headers.get("Content-Type") != "application/x-protobuf":
                return self.answer(415)
            request = ExportLogsServiceRequest()
            try:
                request.ParseFromString(body)
            except DecodeError:
                return self.answer(400)
            kept = []
            for resource_logs in request.resource_logs:
                resource = attributes(resource_logs.resource.attributes)
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        kept.append(
                            {
                                "body": value_of(record.body),
                                "attributes": attributes(record.attributes),
                                "severity_number": record.severity_number,
                                "severity_text": record.severity_text,
                                "event_name": record.event_name,
                                "time_unix_nano": record.time_unix_nano,
                                "scope": scope_logs.scope.name,
                                "resource": resource,
                            }
                        )
            seqs = [k["attributes"].get("airlock.seq") for k in kept]
            with lock:
                if state["to_fail"] > 0:
                    state["to_fail"] -= 1
                    self.say(503, seqs)
                    return self.answer(503, headers=[("Retry-After", "1")])
                with open(args.records, "a") as records, open(args.meta, "a") as meta:
                    for k in kept:
                        records.write(k["body"] + "\n")
                        meta.write(json.dumps({key: v for key, v in k.items() if key != "body"}) + "\n")
            self.say(200, seqs)
            self.answer(200, ExportLogsServiceResponse().SerializeToString())

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(json.dumps({"listening": args.port}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
