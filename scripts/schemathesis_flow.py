"""A walk through airlock serve's API with real work, for scripts/test-schemathesis.sh: sessions
that change files (hazards among them), their diffs, applies refused and done, a revert, a run
paused, resumed and killed, the kill switch, throwaway runs that time out, keep their layer, or
print more than the server keeps — what schemathesis's generated requests seldom reach. Every
answer is checked against the OpenAPI document the server serves: its status is documented for
the operation, and its body matches the schema of that status and media type (NDJSON line by
line).

    python3 scripts/schemathesis_flow.py URL AGENT_TOKEN OPERATOR_TOKEN
"""

import json
import sys
import threading
import time

import jsonschema_rs
import requests

URL, AGENT, OPERATOR = sys.argv[1:4]
DOC = requests.get(f"{URL}/openapi.json", timeout=10).json()
checked = 0


def pointer(ref):
    node = DOC
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def validator(schema):
    root = dict(schema, components=DOC["components"])
    root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return jsonschema_rs.validator_for(root)


def conform(response, template, method):
    """The answer is one the document describes for `method template` (a path of the document)."""
    global checked
    operation = DOC["paths"][template][method]
    status = str(response.status_code)
    documented = operation["responses"].get(status)
    assert documented is not None, f"{method.upper()} {template}: status {status} is not documented: {response.text[:300]}"
    if "$ref" in documented:
        documented = pointer(documented["$ref"])
    media = response.headers.get("content-type", "").split(";")[0].strip()
    content = documented.get("content", {})
    assert media in content, f"{method.upper()} {template} {status}: {media!r} is not documented ({list(content)})"
    check = validator(content[media]["schema"])
    if media == "application/x-ndjson":
        assert response.text.endswith("\n"), f"{template}: the stream does not end with a newline"
        values = [json.loads(line) for line in response.text.split("\n")[:-1]]
    elif media == "application/json":
        values = [response.json()]
    else:
        values = [response.text]
    for value in values:
        errors = [f"{e.message} at {list(e.instance_path)}" for e in check.iter_errors(value)]
        assert not errors, f"{method.upper()} {template} {status}: {errors[:3]}: {json.dumps(value)[:400]}"
    for name, header in documented.get("headers", {}).items():
        if "$ref" in header:
            header = pointer(header["$ref"])
        if header.get("required"):
            assert name in response.headers, f"{template} {status}: no {name} header"
    checked += 1
    return values


def call(method, path, token, template=None, body=None, expect=None, headers=None, **kwargs):
    """Ask, check the answer against the document, and return (status, values)."""
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    response = requests.request(method, URL + path, headers=sent, json=body, timeout=120, **kwargs)
    values = conform(response, template or path, method.lower())
    if expect is not None:
        assert response.status_code == expect, f"{method} {path}: {response.status_code}, not {expect}: {response.text[:400]}"
    return response.status_code, values


S = "/v1/sessions/{id}"


def session_flow():
    name = f"flow-{time.time_ns()}"
    _, [made] = call("POST", "/v1/sessions", AGENT, body={"name": name}, expect=201)
    sid = made["id"]
    script = (
        "echo plain > b.txt; echo hello > a.txt; echo 'export X=1' > .envrc; mkdir -p .github/workflows;"
        " echo 'on: push' > .github/workflows/ci.yml; ln -s /etc/passwd outside; chmod 666 a.txt"
    )
    _, [ran] = call("POST", f"/v1/sessions/{sid}/runs", AGENT, f"{S}/runs", {"command": script}, 200)
    assert ran["exit_code"] == 0, ran
    _, [diff] = call("GET", f"/v1/sessions/{name}/diff", AGENT, f"{S}/diff", expect=200)
    hazardous = sorted(c["path"] for c in diff["changes"] if c["hazards"])
    assert hazardous, diff
    status, [patch] = call("GET", f"/v1/sessions/{sid}/diff", AGENT, f"{S}/diff", expect=200, headers={"Accept": "text/x-diff"})
    assert "a.txt" in patch, patch[:300]
    call("POST", f"/v1/sessions/{sid}/apply", AGENT, f"{S}/apply", {}, 403)
    _, [dry] = call("POST", f"/v1/sessions/{sid}/apply", OPERATOR, f"{S}/apply", {"dry_run": True}, 409)
    assert dry["number"] is None, dry
    # A digest that is not the change set's: nothing written, 409 review_stale.
    stale = "sha256:" + "0" * 64
    assert diff["digest"] != stale, diff
    _, [refused] = call("POST", f"/v1/sessions/{sid}/apply", OPERATOR, f"{S}/apply", {"reviewed": stale}, 409)
    assert refused["code"] == "review_stale", refused
    _, [left] = call("POST", f"/v1/sessions/{sid}/apply", OPERATOR, f"{S}/apply", {}, 409)
    assert any(i["result"] == "hazard" for i in left["items"]), left
    # b.txt, the one change without a hazard, was written by it: apply number 1.
    assert any(i["path"] == "b.txt" and i["result"] == "applied" for i in left["items"]), left
    call("POST", f"/v1/sessions/{sid}/apply", OPERATOR, f"{S}/apply", {"allow_hazards": hazardous}, 200)
    call("POST", f"/v1/sessions/{sid}/runs", AGENT, f"{S}/runs", {"command": "true"}, 409)
    # Two applies (the one that left the hazards out, then the one that wrote them): two
    # reverts, the last apply first.
    for number in (2, 1):
        _, [reverted] = call("POST", f"/v1/sessions/{sid}/revert", OPERATOR, f"{S}/revert", expect=200)
        assert reverted["number"] == number and reverted["lifecycle"] == "active", reverted
    call("POST", f"/v1/sessions/{sid}/revert", OPERATOR, f"{S}/revert", expect=409)
    _, events = call("POST", f"/v1/sessions/{sid}/runs/stream", AGENT, f"{S}/runs/stream", {"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}, 200)
    assert events[-1]["type"] == "result" and events[-1]["exit_code"] == 3, events
    call("GET", f"/v1/sessions/{sid}", AGENT, S, expect=200)
    call("GET", "/v1/sessions", AGENT, expect=200)
    control_flow(sid)
    call("POST", f"/v1/sessions/{sid}/discard", OPERATOR, f"{S}/discard", expect=200)
    call("POST", f"/v1/sessions/{sid}/runs", AGENT, f"{S}/runs", {"command": "true"}, 409)
    # Judged before the 200: a stream refused is a status, as for the run answered at its end.
    _, [refused] = call("POST", f"/v1/sessions/{sid}/runs/stream", AGENT, f"{S}/runs/stream", {"command": "true"}, 409)
    assert refused["code"] == "session_discarded", refused
    call("POST", f"/v1/sessions/{sid}/revert", OPERATOR, f"{S}/revert", expect=409)
    call("POST", f"/v1/sessions/{sid}/discard", OPERATOR, f"{S}/discard", {"force": True}, 400)


def control_flow(sid):
    """A run paused, seen paused, resumed, then killed: its answer says the kill switch ended it."""
    answer = {}
    run = threading.Thread(target=lambda: answer.update(call("POST", f"/v1/sessions/{sid}/runs", AGENT, f"{S}/runs", {"command": "sleep 60"})[1][0]))
    run.start()
    for _ in range(100):
        _, [status] = call("GET", "/v1/status", AGENT, expect=200)
        if status["running"]:
            break
        time.sleep(0.1)
    assert status["running"], status
    call("POST", f"/v1/sessions/{sid}/pause", AGENT, f"{S}/pause", {}, 403)
    call("POST", f"/v1/sessions/{sid}/pause", OPERATOR, f"{S}/pause", {"network_only": True}, 400)
    _, [paused] = call("POST", f"/v1/sessions/{sid}/pause", OPERATOR, f"{S}/pause", {"reason": "look"}, 200)
    assert paused["sandboxes"] and paused["failed"] == 0, paused
    _, [status] = call("GET", "/v1/status", OPERATOR, expect=200)
    assert any(r["paused"] for r in status["running"]), status
    call("POST", f"/v1/sessions/{sid}/resume", OPERATOR, f"{S}/resume", {}, 200)
    _, [killed] = call("POST", f"/v1/sessions/{sid}/kill", OPERATOR, f"{S}/kill", {"reason": "flow"}, 200)
    assert killed["action"] == "kill", killed
    run.join(60)
    assert answer.get("limit") == "kill_switch", answer
    # Nothing runs in it now: nothing to kill, but nothing to cut the network of is a mistake.
    _, [none] = call("POST", f"/v1/sessions/{sid}/kill", OPERATOR, f"{S}/kill", {}, 200)
    assert none["sandboxes"] == [], none
    call("POST", f"/v1/sessions/{sid}/kill", OPERATOR, f"{S}/kill", {"network_only": True}, 404)
    call("POST", f"/v1/sessions/{sid}/pause", OPERATOR, f"{S}/pause", {}, 404)


def throwaway_flow():
    _, [kept] = call("POST", "/v1/runs", AGENT, body={"command": "echo k > kept.txt", "keep": True}, expect=200)
    assert kept["kept"] and kept["session"], kept
    call("GET", f"/v1/sessions/{kept['session']}", AGENT, S, expect=200)
    _, [timed] = call("POST", "/v1/runs", AGENT, body={"command": "sleep 30", "timeout": 0.3}, expect=200)
    assert timed["limit"] == "timeout" and timed["exit_code"] == 124, timed
    _, [big] = call("POST", "/v1/runs", AGENT, body={"command": "head -c 9000000 /dev/zero | tr '\\0' x"}, expect=200)
    assert big["stdout_truncated"] and not big["stderr_truncated"], {k: v for k, v in big.items() if k != "stdout"}
    # A job larger than an environment variable may hold: 60,000 control characters are six
    # times as many bytes in JSON.
    _, [long] = call("POST", "/v1/runs", AGENT, body={"command": "true #" + "\x01" * 60000}, expect=200)
    assert long["exit_code"] == 0, long
    call("POST", "/v1/runs", AGENT, body={"command": "x" * 70000}, expect=400)
    call("POST", "/v1/runs", AGENT, body={"command": "true", "argv": ["true"]}, expect=400)
    call("POST", "/v1/runs", AGENT, body=[None, None], expect=400)
    call("POST", "/v1/runs", AGENT, data=b"{not json", expect=400, headers={"Content-Type": "application/json"})
    # A body not said to be JSON (a browser's cross-site form or text/plain post) is not read.
    call("POST", "/v1/runs", AGENT, data=b'{"command": "true"}', expect=415, headers={"Content-Type": "text/plain"})
    call("POST", "/v1/runs", AGENT, body={"command": "x" * 2_000_000}, expect=413)
    call("POST", "/v1/runs", AGENT, body={"command": "true", "workspace": "/"}, expect=403)
    _, events = call("POST", "/v1/runs/stream", AGENT, body={"command": "printf 'a\\342\\200'; printf '\\250b'"}, expect=200)
    assert events[-1]["type"] == "result", events


def kill_switch_flow():
    call("POST", "/v1/disable", AGENT, body={"reason": "no"}, expect=403)
    call("POST", "/v1/disable", OPERATOR, body={"reason": " "}, expect=400)
    call("POST", "/v1/disable", OPERATOR, body={"reason": "flow: incident drill"}, expect=200)
    _, [refused] = call("POST", "/v1/runs", AGENT, body={"command": "true"}, expect=403)
    assert refused["code"] == "disabled", refused
    _, [refused] = call("POST", "/v1/runs/stream", AGENT, body={"command": "true"}, expect=403)
    assert refused["code"] == "disabled", refused
    call("POST", "/v1/sessions", AGENT, body={}, expect=403)
    _, [status] = call("GET", "/v1/status", AGENT, expect=200)
    assert status["switches"]["profiles"], status
    _, [enabled] = call("POST", "/v1/enable", OPERATOR, body={}, expect=200)
    assert enabled["was_on"], enabled
    call("POST", "/v1/runs", AGENT, body={"command": "true"}, expect=200)


def edges_flow():
    call("GET", "/v1/health", None, expect=200)
    for token in (None, "airlock_0000000000000000_" + "0" * 64, "nonsense"):
        call("GET", "/v1/sessions", token, expect=401)
    call("GET", "/v1/sessions/%FF", AGENT, S, expect=400)
    call("GET", "/v1/sessions/no-such-session", AGENT, S, expect=404)
    call("GET", "/v1/audit?limit=5&action=run&since=2020-01-01 00:00:00", AGENT, "/v1/audit", expect=200)
    call("GET", "/v1/audit?since=yesterday", AGENT, "/v1/audit", expect=400)
    call("GET", "/v1/audit?colour=blue", AGENT, "/v1/audit", expect=400)
    _, [records] = call("GET", "/v1/audit?action=run.result", AGENT, "/v1/audit", expect=200)
    assert records["records"], "no run.result record for the agent"


def main():
    session_flow()
    throwaway_flow()
    kill_switch_flow()
    edges_flow()
    print(f"flow: {checked} answers, each as the document describes it")


if __name__ == "__main__":
    main()
