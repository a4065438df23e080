"""airlock's MCP server driven by the official MCP Python SDK (the `mcp` package from PyPI), as an
agent's client would drive it. Run by scripts/test-mcp.sh with each pinned SDK: 1.x speaks the
2025-11-25 revision (initialize handshake), 2.x the stateless 2026-07-28 one.

    python mcp_client.py --airlock BIN --state DIR --workspace DIR [--uid N --home DIR]
                         [--url http://127.0.0.1:PORT/mcp --token AGENT --operator-token OP]

With --uid the server runs as that user (setpriv), as an ordinary user runs `airlock mcp`. With
--url the client speaks Streamable HTTP to `airlock serve`'s /mcp with the agent token (the
server is started by scripts/test-mcp.sh, as the same user and state directory), else it starts
`airlock mcp` on stdio.
Exits non-zero at the first check that fails, saying which.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import mcp

SDK_MAJOR = int(mcp.__version__.split(".")[0]) if hasattr(mcp, "__version__") else None
if SDK_MAJOR is None:
    from importlib.metadata import version

    SDK_MAJOR = int(version("mcp").split(".")[0])

TOOLS = {"run", "start", "poll", "changes", "log"}
NEVER = {"apply", "revert", "discard", "kill", "pause", "resume", "disable", "enable", "policy"}


def check(ok, what):
    if not ok:
        print(f"FAILED (mcp {SDK_MAJOR}.x): {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def field(result, camel, snake):
    """A result's field under either SDK's spelling."""
    return getattr(result, snake, None) if hasattr(result, snake) else getattr(result, camel)


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


class Airlock:
    """The server's command line, as this user or another."""

    def __init__(self, args):
        self.args = args

    def prefix(self):
        if self.args.uid is None:
            return []
        uid = str(self.args.uid)
        return ["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--"]

    def env(self):
        env = dict(os.environ)
        if self.args.home:
            env["HOME"] = self.args.home
            env.pop("XDG_STATE_HOME", None)
            env.pop("XDG_CONFIG_HOME", None)
        return env

    def server(self, *extra):
        argv = self.prefix() + [self.args.airlock, "--state-dir", self.args.state, "mcp",
                                "--workspace", self.args.workspace, *extra]
        return mcp.StdioServerParameters(command=argv[0], args=argv[1:], env=self.env())

    def cli(self, *words):
        argv = self.prefix() + [self.args.airlock, "--state-dir", self.args.state, *words]
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, check=False)


class Http:
    """Where an HTTP client connects: /mcp of a running server, with a bearer token."""

    def __init__(self, url, token):
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}


class Session:
    """One connected client, under either SDK's API, on stdio or over HTTP."""

    def __init__(self, target):
        self.target = target
        self.stack = None

    def transport(self):
        if isinstance(self.target, Http):
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=self.target.headers)
            return streamable_http_client(self.target.url, http_client=client)
        return self.target

    async def __aenter__(self):
        from contextlib import AsyncExitStack

        self.stack = AsyncExitStack()
        if SDK_MAJOR >= 2:
            self.client = await self.stack.enter_async_context(mcp.Client(self.transport(), mode="auto"))
            self.protocol = self.client.protocol_version
            return self
        if isinstance(self.target, Http):
            from mcp.client.streamable_http import streamablehttp_client

            streams = streamablehttp_client(self.target.url, headers=self.target.headers)
            read, write, _ = await self.stack.enter_async_context(streams)
        else:
            from mcp.client.stdio import stdio_client

            read, write = await self.stack.enter_async_context(stdio_client(self.target))
        self.client = await self.stack.enter_async_context(mcp.ClientSession(read, write))
        self.protocol = (await self.client.initialize()).protocolVersion
        return self

    async def __aexit__(self, *exc):
        await self.stack.aclose()

    async def tools(self):
        return (await self.client.list_tools()).tools

    async def call(self, name, arguments, progress=None):
        return await self.client.call_tool(name, arguments, progress_callback=progress)


def records(airlock, session):
    out = airlock.cli("log", "--json", "--session", session)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


async def tools_are_the_agents(client):
    tools = await client.tools()
    names = {tool.name for tool in tools}
    check(names == TOOLS, f"the tools are {sorted(TOOLS)} (got {sorted(names)})")
    check(not names & NEVER, "no tool applies, reverts, discards, kills or changes policy")
    for tool in tools:
        check(field(tool, "outputSchema", "output_schema") is not None, f"{tool.name} has an output schema")


async def a_run_changes_only_the_session(client, args):
    result = await client.call("run", {"command": "id -u; echo made > made.txt; cat seed.txt"})
    structured = field(result, "structuredContent", "structured_content")
    check(not field(result, "isError", "is_error"), "run answers without error")
    check(structured["exit_code"] == 0, "the command exits 0")
    lines = structured["stdout"].splitlines()
    check(lines[0] != "0", f"the command ran as airlock's sandbox user, not root (id -u said {lines[0]})")
    check(lines[1] == "seed", "the command read the workspace")
    check(not os.path.exists(os.path.join(args.workspace, "made.txt")), "the host workspace is untouched")
    check("airlock apply" in text_of(result), "the answer tells the agent a person applies")
    changes = await client.call("changes", {})
    listed = [f["path"] for f in field(changes, "structuredContent", "structured_content")["files"]]
    check(listed == ["made.txt"], f"changes lists the file (got {listed})")
    check("+made" in text_of(changes), "changes carries the patch")
    return structured["session"]


async def output_comes_as_progress(client):
    seen = []

    async def progress(done, total, message):
        seen.append((time.monotonic(), message))

    result = await client.call(
        "run", {"command": "for i in 1 2 3; do echo line$i; sleep 1.5; done"}, progress
    )
    ended = time.monotonic()
    said = "".join(message or "" for _, message in seen)
    check(all(f"line{i}" in said for i in (1, 2, 3)), f"progress carried the output (got {said!r})")
    check(seen and ended - seen[0][0] > 1.5, "the first line came before the command ended")
    check(field(result, "structuredContent", "structured_content")["exit_code"] == 0, "the long command exits 0")


async def start_and_poll(client):
    started = await client.call("start", {"command": "sleep 1; echo late; exit 3"})
    run = field(started, "structuredContent", "structured_content")["run"]
    out, result = "", None
    for _ in range(20):
        polled = field(await client.call("poll", {"run": run, "wait": 2}), "structuredContent", "structured_content")
        out += polled["stdout"]
        if not polled["running"]:
            result = polled["result"]
            break
    check(result is not None and result["exit_code"] == 3, "poll tells the started run's end")
    check(out == "late\n", f"poll carried its output (got {out!r})")
    again = await client.call("poll", {"run": run})
    check(field(again, "isError", "is_error") and "no_such_run" in text_of(again), "a run's end is told once")


async def refusals_are_said(client, airlock, args):
    bad = await client.call("run", {})
    check(field(bad, "isError", "is_error") and "no_command" in text_of(bad), "a run without a command is refused, saying so")
    disabled = airlock.cli("disable", "--reason", "mcp test")
    check(disabled.returncode == 0, f"airlock disable works ({disabled.stderr.strip()})")
    try:
        refused = await client.call("run", {"command": "echo x > refused.txt"})
        check(field(refused, "isError", "is_error"), "the kill switch refuses the run")
        check("disabled" in text_of(refused) and "mcp test" in text_of(refused), "the refusal names the switch and its reason")
    finally:
        airlock.cli("enable")
    changes = await client.call("changes", {})
    listed = [f["path"] for f in field(changes, "structuredContent", "structured_content")["files"]]
    check("refused.txt" not in listed, "the refused command did not run")


def the_log_has_it(airlock, session):
    found = records(airlock, session)
    intents = [r for r in found if r.get("action") == "run.intent"]
    check(any("made.txt" in " ".join(r.get("argv", [])) for r in intents), "the audit log has the run's intent")


async def eventually(done, within):
    """Whether done() holds, asked every 0.1 s for up to `within` seconds."""
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def pgrep(pattern):
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


async def running(pattern, within=30):
    """Whether a process whose command line has `pattern` runs, looked for up to `within` s."""
    return await eventually(lambda: pgrep(pattern), within)


async def gone(pattern, within=10):
    """Whether no process whose command line has `pattern` is left, within `within` s."""
    return await eventually(lambda: not pgrep(pattern), within)


async def abandoned(airlock, session, within=10):
    """Whether the session's log records a run.abandoned, within `within` s."""
    def recorded():
        return any(r.get("action") == "run.abandoned" for r in records(airlock, session))
    return await eventually(recorded, within)


async def a_cancelled_call_ends_its_run(client, airlock):
    """The client stops waiting for a run (it cancels the call): the command is interrupted."""
    call = asyncio.ensure_future(client.call("run", {"command": "echo begun > begun.txt; sleep 58.123"}))
    check(await running("sleep 58.123"), "the run to be cancelled started")
    call.cancel()
    try:
        await call
    except BaseException:
        pass
    check(await gone("sleep 58.123"), "a run whose call the client cancelled is ended")
    session = field((await client.call("log", {"limit": 1})), "structuredContent", "structured_content")["session"]
    check(await abandoned(airlock, session), "the cancelled run is recorded as abandoned")


def gone_before_the_answer(args):
    """An HTTP client that goes away (its connection closed: a timeout, a crash) before the answer
    to its call: the command is interrupted. Raw HTTP, as a client that dies mid-call leaves it."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(args.url)
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "run", "arguments": {"command": "echo begun; sleep 57.321"}}}
    body = json.dumps(call).encode()
    head = (f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {args.token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {len(body)}\r\n\r\n")
    connection = socket.create_connection((url.hostname, url.port))
    connection.sendall(head.encode() + body)
    connection.settimeout(10)
    connection.recv(4096)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not sandboxed("sleep 57.321"):
        time.sleep(0.1)
    check(sandboxed("sleep 57.321"), "the call's command is running")
    connection.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sandboxed("sleep 57.321"):
        time.sleep(0.2)
    check(not sandboxed("sleep 57.321"), "a call whose client went away is ended")


def sandboxed(marker):
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.strip() != ""


def http_refusals(args):
    """/mcp checks each request's token as the API does."""
    import urllib.error
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()

    def status(token):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(args.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    code, text = status(None)
    check(code == 401 and "token_missing" in text, f"/mcp without a token is 401 token_missing (got {code})")
    code, text = status("airlock_nonsense")
    check(code == 401, f"/mcp with a token that is no token is 401 (got {code})")
    code, text = status(args.operator_token)
    check(code == 403 and "role_forbidden" in text, f"/mcp refuses an operator's token: 403 role_forbidden (got {code})")


async def client_gone_ends_its_runs(airlock, args):
    async with Session(airlock.server()) as client:
        started = await client.call("start", {"command": "echo begun; sleep 59.123"})
        session = field(started, "structuredContent", "structured_content")["session"]
        check(await running("sleep 59.123"), "the run the client will leave started")
    # The client closed the server's stdin: the run is interrupted, then killed, and recorded.
    check(await gone("sleep 59.123"), "no sandbox process outlives the client")
    check(await abandoned(airlock, session), "the run the client left is recorded as abandoned")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--airlock", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--home")
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--operator-token")
    args = parser.parse_args()
    airlock = Airlock(args)
    target = Http(args.url, args.token) if args.url else airlock.server()
    if args.url:
        http_refusals(args)
    async with Session(target) as client:
        expected = "2026-07-28" if SDK_MAJOR >= 2 else "2025-11-25"
        check(client.protocol == expected, f"the client speaks {expected} (got {client.protocol})")
        await tools_are_the_agents(client)
        session = await a_run_changes_only_the_session(client, args)
        await output_comes_as_progress(client)
        await start_and_poll(client)
        await refusals_are_said(client, airlock, args)
        if SDK_MAJOR >= 2:
            # mcp 1.x sends no notifications/cancelled when a call is abandoned: nothing to see.
            await a_cancelled_call_ends_its_run(client, airlock)
    the_log_has_it(airlock, session)
    if args.url:
        gone_before_the_answer(args)
    else:
        await client_gone_ends_its_runs(airlock, args)


asyncio.run(main())
