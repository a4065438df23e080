"""Schemathesis hooks for scripts/test-schemathesis.sh (loaded through SCHEMATHESIS_HOOKS).

- NDJSON answers (the streamed runs) are checked line by line against the schema their media
  type documents, which describes one line: schemathesis itself validates JSON bodies only.
- GET /v1/audit?follow=true answers a stream that never ends (it follows the log until the
  client goes away): such a request is sent with follow=false instead, and the script checks
  the followed stream apart.
"""

import json

import jsonschema_rs
import schemathesis

NDJSON = "application/x-ndjson"
RUN_STREAMS = ("/v1/runs/stream", "/v1/sessions/{id}/runs/stream")

_validators = {}


def _line_validator(case, status, media_type):
    """A validator of one line, for the documented schema of this operation, status and type."""
    key = (case.operation.path, case.operation.method.lower(), status, media_type)
    if key not in _validators:
        doc = case.operation.schema.raw_schema
        responses = doc["paths"][case.operation.path][case.operation.method.lower()]["responses"]
        response = responses.get(str(status)) or responses.get("default")
        if response is None or "$ref" in response:
            _validators[key] = None
        else:
            schema = response.get("content", {}).get(media_type, {}).get("schema")
            if schema is None:
                _validators[key] = None
            else:
                # The document's components at the root, so that its "#/components/..." refs resolve.
                root = dict(schema, components=doc.get("components", {}))
                root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
                _validators[key] = jsonschema_rs.validator_for(root)
    return _validators[key]


@schemathesis.check
def ndjson_conformance(ctx, response, case):
    """Every line of an NDJSON answer is a JSON value its documented schema accepts; a run's
    stream ends with exactly one `result` or `error` line, and with a newline."""
    content_type = (response.headers.get("content-type") or [""])[0]
    if content_type.split(";")[0].strip().lower() != NDJSON:
        return None
    validator = _line_validator(case, response.status_code, NDJSON)
    if validator is None:
        raise AssertionError(f"status {response.status_code} with {NDJSON} is not documented")
    body = response.content.decode("utf-8")
    if body and not body.endswith("\n"):
        raise AssertionError(f"the stream does not end with a newline: {body[-200:]!r}")
    events = []
    # Lines end at "\n" only (str.splitlines would also cut at U+0085, U+2028…, which JSON
    # strings carry unescaped).
    for number, line in enumerate(body.split("\n")[:-1] if body else [], 1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            raise AssertionError(f"line {number} is not JSON ({e}): {line[:200]!r}") from None
        errors = [f"{e.message} at {list(e.instance_path)}" for e in validator.iter_errors(event)]
        if errors:
            raise AssertionError(f"line {number} does not match its schema: {errors[:3]}: {line[:300]!r}")
        events.append(event)
    if case.operation.path in RUN_STREAMS:
        last = [e.get("type") for e in events if e.get("type") in ("result", "error")]
        if not events or last != [events[-1].get("type")] or len(last) != 1:
            kinds = [e.get("type") for e in events]
            raise AssertionError(f"a run's stream must end with one result or error line, and only there: {kinds}")
    return True


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """Never follow the audit log: that answer would not end."""
    if case.operation.path == "/v1/audit" and isinstance(case.query, dict):
        if case.query.get("follow") in (True, "true"):
            case.query["follow"] = "false"
