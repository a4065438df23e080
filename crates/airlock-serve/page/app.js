// airlock's review page: a client of airlock serve's API, logged in with an operator's token kept
// behind an HttpOnly cookie. Every decision is the server's (core's); this only shows and asks.
// Text from sessions (paths, commands, file contents) is put in the page as text, never as HTML.
"use strict";

// The login's secret: sent with every request (the cookie alone opens nothing, as browsers send a
// host's cookies to every port of it). Kept in sessionStorage, which is this origin's alone.
let csrf = sessionStorage.getItem("airlock-csrf");
let who = null;
let following = null; // the live log's reader of the session shown, stopped when another view opens
let watching = null; // the timer that asks for the session's approvals again, likewise

// ---------- talking to the API ----------

async function api(method, path, body, accept) {
  const headers = { Accept: accept || "application/json" };
  if (csrf) headers["X-Airlock-CSRF"] = csrf;
  if (method !== "GET") headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: method === "GET" ? undefined : JSON.stringify(body || {}),
  });
  const type = response.headers.get("content-type") || "";
  let data = null;
  if (type.startsWith("application/json")) data = await response.json();
  else data = await response.text();
  if (response.status === 401 && path !== "/v1/login") {
    showLogin("Your login ended: log in again.");
    throw new Error("login required");
  }
  return { status: response.status, ok: response.ok, data, headers: response.headers };
}

function problem(answer) {
  const d = answer.data;
  if (d && typeof d === "object" && d.message) return `${d.message} (${d.code}, HTTP ${answer.status})`;
  return `HTTP ${answer.status}`;
}

// ---------- building the page (text only) ----------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "checked" || key === "disabled") node[key] = Boolean(value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const main = () => document.getElementById("main");

function show(...nodes) {
  main().replaceChildren(...present(nodes));
}

// What replaceChildren and append take: nodes and text, never a null said as "null".
function present(nodes) {
  return nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false);
}

function message(kind, text) {
  return el("div", { class: `message ${kind}`, role: kind === "bad" ? "alert" : "status" }, text);
}

// Control characters, bidirectional overrides and invisible characters are shown as what they
// are: a file that looks harmless on screen must not hide what it holds.
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\p{Cf}\p{Co}\p{Cn}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}]/gu;

function visible(text) {
  text = String(text ?? "");
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(HIDDEN)) {
    if (match.index > last) parts.push(text.slice(last, match.index));
    const code = match[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    const name = match[0] === "\r" ? "CR" : match[0] === "\u001b" ? "ESC" : `U+${code}`;
    parts.push(el("span", { class: "ctl", title: `hidden character U+${code}` }, `⟨${name}⟩`));
    last = match.index + match[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return parts;
}

// A time as records spell it (RFC 3339), or as approvals do (seconds since the epoch).
function when(value) {
  if (value === null || value === undefined || value === "") return "";
  const t = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return isNaN(t) ? String(value) : t.toLocaleString();
}

// ---------- login ----------

function showLogin(note) {
  who = null;
  csrf = null;
  sessionStorage.removeItem("airlock-csrf");
  if (following) following.abort();
  following = null;
  if (watching) clearInterval(watching);
  watching = null;
  document.getElementById("who").replaceChildren();
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "airlock_…", "aria-label": "operator token" });
  const status = el("div");
  const form = el("form", { id: "login", onsubmit: async (event) => {
    event.preventDefault();
    if (await logIn({ token: input.value }, status)) {
      if (location.hash !== "#/") location.hash = "#/";
      else await route();
    }
  } },
    el("p", {}, "Open the link ", el("code", {}, "airlock review"), " prints at the machine, or paste an operator token (agent tokens never open this page)."),
    el("div", { class: "actions" }, input, el("button", { class: "primary", type: "submit" }, "Log in")),
    status);
  show(el("h1", {}, "Log in"), note ? message("bad", note) : null, form);
}

async function logIn(body, status) {
  const answer = await api("POST", "/v1/login", body);
  if (!answer.ok) {
    status.replaceChildren(message("bad", problem(answer)));
    return false;
  }
  loggedIn(answer.data);
  return true;
}

function loggedIn(data) {
  who = data;
  if (data.csrf) {
    csrf = data.csrf;
    sessionStorage.setItem("airlock-csrf", csrf);
  }
  document.getElementById("who").replaceChildren(
    visible(`operator token ${data.token_name || data.token_id} · profile ${data.profile}`),
    el("button", { id: "logout", onclick: async () => {
      await api("POST", "/v1/logout", {});
      showLogin("Logged out.");
    } }, "Log out"));
}

// ---------- the list of sessions ----------

async function sessionsView() {
  show(el("h1", {}, "Sessions"), el("p", { class: "quiet" }, "Loading…"));
  const [sessions, approvals, status] = await Promise.all([
    api("GET", "/v1/sessions"),
    api("GET", "/v1/approvals"),
    api("GET", "/v1/status"),
  ]);
  if (!sessions.ok) return show(el("h1", {}, "Sessions"), message("bad", problem(sessions)));
  const waiting = approvalsBySession(approvals);
  // A session's hazards take a diff (every changed file read): the 20 latest sessions' only.
  let diffs = 0;
  const rows = sessions.data.sessions.map((s) => {
    const hazards = el("td", { class: "hazards" }, "…");
    const row = el("tr", { "data-session": s.id },
      el("td", {}, el("a", { href: `#/s/${encodeURIComponent(s.id)}` }, s.name || s.id)),
      el("td", {}, el("span", { class: "pill" }, s.status), " ", el("span", { class: "quiet" }, s.lifecycle || "")),
      el("td", {}, s.profile ? s.profile.name : ""),
      el("td", { class: "mono" }, s.token || "—"),
      el("td", {}, String(s.runs ?? "") + (s.interrupted_runs ? ` (+${s.interrupted_runs} interrupted)` : "")),
      el("td", {}, s.changed_files === null || s.changed_files === undefined ? "—" : String(s.changed_files)),
      hazards,
      el("td", {}, waiting[s.id] ? el("span", { class: "pill warn" }, `${waiting[s.id]} waiting`) : "—"),
      el("td", { class: "quiet" }, when(s.last_run_at || s.created_at)));
    if (diffs < 20) {
      diffs += 1;
      countHazards(s, hazards);
    } else {
      hazards.textContent = "open it";
    }
    return row;
  });
  show(
    el("h1", {}, "Sessions"),
    switchCard(status),
    rows.length === 0
      ? el("p", { class: "quiet" }, "No sessions yet.")
      : el("table", { id: "sessions" },
        el("thead", {}, el("tr", {}, ["Session", "Status", "Profile", "Token", "Runs", "Changed files", "Hazards", "Approvals", "Last"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
}

function approvalsBySession(answer) {
  const counts = {};
  if (!answer.ok || !answer.data || !Array.isArray(answer.data.approvals)) return counts;
  for (const a of answer.data.approvals) if (a.session) counts[a.session] = (counts[a.session] || 0) + 1;
  return counts;
}

async function countHazards(session, cell) {
  if (session.status !== "idle" || !session.changed_files) {
    cell.textContent = "—";
    return;
  }
  const diff = await api("GET", `/v1/sessions/${encodeURIComponent(session.id)}/diff`);
  if (!diff.ok) {
    cell.textContent = "?";
    return;
  }
  const n = diff.data.changes.filter((c) => (c.hazards || []).length > 0).length;
  cell.replaceChildren(n ? el("span", { class: "pill bad" }, String(n)) : "0");
}

// The kill switch for the token's profile: disable refuses every run of it until enabled.
function switchCard(status) {
  const reason = el("input", { type: "text", id: "switch-reason", placeholder: "reason (recorded in the audit log)" });
  const out = el("div");
  const act = (what) => async () => {
    const answer = await api("POST", `/v1/${what}`, { reason: reason.value || undefined });
    out.replaceChildren(answer.ok ? message("ok", `${what}d`) : message("bad", problem(answer)));
  };
  const said = status.ok ? JSON.stringify(status.data.disabled ?? status.data) : problem(status);
  return el("div", { class: "card" },
    el("strong", {}, "Kill switch for this profile "), el("span", { class: "quiet mono" }, said),
    el("div", { class: "actions" }, reason,
      el("button", { class: "danger", id: "disable", onclick: act("disable") }, "Disable"),
      el("button", { id: "enable", onclick: act("enable") }, "Enable")),
    out);
}

// ---------- one session ----------

async function sessionView(id) {
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  show(el("h1", {}, `Session ${id}`), el("p", { class: "quiet" }, "Loading…"));
  const summary = await api("GET", path);
  if (!summary.ok) return show(el("h1", {}, `Session ${id}`), message("bad", problem(summary)));
  const s = summary.data;
  const feedback = el("div", { id: "feedback" });
  const runs = el("div", { id: "runs" }, el("p", { class: "quiet" }, "Loading…"));
  const approvals = el("div", { id: "approvals" });
  const diff = el("div", { id: "diff" }, el("p", { class: "quiet" }, "Loading…"));
  const log = el("tbody");
  show(
    el("h1", {}, `Session ${s.name || s.id} `, el("span", { class: "pill", id: "status" }, s.status)),
    el("p", { class: "quiet" }, `profile ${s.profile ? s.profile.name : ""} · workspace `, el("code", {}, s.workspace || ""),
      ` · ${s.runs ?? 0} runs · ${s.lifecycle || ""}`),
    controlCard(s, feedback),
    feedback,
    el("h2", {}, "Waiting for a person"), approvals,
    el("h2", {}, "Changes"), diff,
    el("h2", {}, "Runs"), runs,
    el("h2", {}, "Audit log, live"), el("div", { class: "log" }, el("table", { id: "log" }, log)));
  // Each part on its own: the changes of a session a run has just started wait for the run's end
  // (the layer is read when no run writes it), and must hold back neither the approvals that run
  // asks for nor the live log.
  follow(s.id, log, runs, approvals);
  // An approval waits seconds, not minutes: asked for again every two seconds besides the log.
  if (watching) clearInterval(watching);
  watching = setInterval(() => loadApprovals(s.id, approvals).catch(() => {}), 2000);
  await Promise.all([
    loadRuns(s.id, runs).catch(shown),
    loadApprovals(s.id, approvals).catch(shown),
    loadDiff(s, diff, feedback).catch(shown),
  ]);
}

function controlCard(s, feedback) {
  const reason = el("input", { type: "text", id: "reason", placeholder: "reason (recorded in the audit log)" });
  const path = `/v1/sessions/${encodeURIComponent(s.id)}`;
  const act = (what) => async () => {
    const answer = await api("POST", `${path}/${what}`, { reason: reason.value || undefined });
    feedback.replaceChildren(answer.ok ? message("ok", `${what}: done`) : message("bad", problem(answer)));
  };
  return el("div", { class: "card" },
    el("strong", {}, "Kill switch"),
    el("div", { class: "actions" }, reason,
      el("button", { class: "danger", id: "kill", onclick: act("kill") }, "Kill"),
      el("button", { id: "pause", onclick: act("pause") }, "Pause"),
      el("button", { id: "resume", onclick: act("resume") }, "Resume")));
}

// Each run of the session, as core gathers them: its command, how it ended, what the gate refused,
// and the end of its output.
async function loadRuns(id, into) {
  const answer = await api("GET", `/v1/sessions/${encodeURIComponent(id)}/runs`);
  if (!answer.ok) return into.replaceChildren(message("bad", problem(answer)));
  const runs = answer.data.runs || [];
  if (runs.length === 0) return into.replaceChildren(el("p", { class: "quiet" }, "No runs yet."));
  // Listed again at every run's record: an output a person opened stays open.
  const opened = new Set([...into.querySelectorAll("tr.run")]
    .filter((row) => row.querySelector("details.output")?.open)
    .map((row) => row.dataset.run));
  into.replaceChildren(el("table", { id: "run-list" },
    el("thead", {}, el("tr", {}, ["When", "Command and output", "Exit", "Duration", "Refused destinations"].map((h) => el("th", {}, h)))),
    el("tbody", {}, runs.slice().reverse().map(runRow))));
  for (const row of into.querySelectorAll("tr.run")) {
    const output = row.querySelector("details.output");
    if (output && opened.has(row.dataset.run)) output.open = true;
  }
}

// What tells a run from the others across listings: its id, or (a run from before runs had one)
// its start and its process.
function runKey(run) {
  return run.run_id || `${run.started_at} ${run.pid}`;
}

function runRow(run) {
  const exit = run.refusal !== undefined ? el("span", { class: "bad" }, "refused")
    : run.interrupted !== undefined ? el("span", { class: "bad", title: run.interrupted }, "interrupted")
    : !run.ended ? el("span", { class: "pill" }, "running")
    : run.exit_code === 0 ? el("span", { class: "ok" }, "0")
    : el("span", { class: "bad" }, String(run.exit_code ?? "?"));
  const refused = (run.refused || []).map((d) => `${d.host}:${d.port} (${d.why || d.rule || ""})`).join("; ");
  // Each word of the command as it was given: where one ends and the next begins is kept.
  const words = run.argv.map((w) => (/^[A-Za-z0-9_.,:\/=+@%-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`)).join(" ");
  return el("tr", { class: "run", "data-run": runKey(run) },
    el("td", { class: "quiet" }, when(run.started_at)),
    el("td", {}, el("pre", { class: "argv" }, visible(words)), outputOf(run)),
    el("td", {}, exit),
    el("td", {}, run.duration_ms !== null && run.duration_ms !== undefined ? `${run.duration_ms} ms` : ""),
    el("td", {}, visible(refused || run.refusal || run.interrupted || "")));
}

function outputOf(run) {
  const o = run.output;
  if (!o) return run.ended && run.refusal === undefined ? el("div", { class: "quiet" }, "output not kept (it went to a terminal)") : null;
  const part = (name, text, cut) => (text || cut ? el("div", { class: `output ${name}` },
    el("div", { class: "quiet" }, cut ? `${name} (the last ${text.length} characters; ${cut} bytes before them not kept)` : name),
    el("pre", {}, visible(text))) : null);
  const parts = present([part("stdout", o.stdout, o.stdout_cut), part("stderr", o.stderr, o.stderr_cut)]);
  return parts.length ? el("details", { class: "output" }, el("summary", {}, "output"), parts) : el("div", { class: "quiet" }, "no output");
}

// ---------- approvals ----------

async function loadApprovals(id, into) {
  const answer = await api("GET", "/v1/approvals");
  if (answer.status === 404) {
    into.replaceChildren(el("p", { class: "quiet" }, "This server asks no approvals."));
    return;
  }
  if (!answer.ok) return into.replaceChildren(message("bad", problem(answer)));
  const mine = (answer.data.approvals || []).filter((a) => a.session === id);
  if (mine.length === 0) return into.replaceChildren(el("p", { class: "quiet" }, "Nothing is waiting."));
  // A card shown already stays, with the reason a person is typing in it (this runs every 2 s):
  // only its countdown is new. A new approval gets a card; an answered one loses its own.
  const shown = new Map([...into.querySelectorAll(".approval")].map((card) => [card.dataset.approval, card]));
  const cards = mine.map((a) => {
    const card = shown.get(a.id);
    if (!card) return approvalCard(a, into, id);
    card.querySelector(".expires").replaceChildren(...visible(expiry(a)));
    return card;
  });
  const same = cards.length === into.children.length && cards.every((card, i) => into.children[i] === card);
  if (!same) into.replaceChildren(...cards);
}

function expiry(a) {
  return `asked by ${a.program || "a program"} (rule ${a.entry || "?"}) · refused if nobody answers by ${when(a.expires_at)}, in ${a.seconds_left ?? "?"} s`;
}

function approvalCard(a, into, id) {
  const reason = el("input", { type: "text", placeholder: "reason (recorded)", class: "approval-reason" });
  const out = el("div");
  const decide = (decision) => async () => {
    const answer = await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}`, { decision, reason: reason.value || undefined });
    if (!answer.ok) return out.replaceChildren(message("bad", problem(answer)));
    await loadApprovals(id, into);
  };
  return el("div", { class: "card approval", "data-approval": a.id },
    // The end of the name (its domain) and the port first: a long name cannot push them away.
    el("div", { class: "asked" }, "port ", el("strong", {}, String(a.port)), " of ",
      el("strong", {}, visible(/^[0-9.]+$|:/.test(a.host) ? a.host : a.host.split(".").slice(-2).join("."))), ":"),
    el("code", { class: "host" }, visible(a.host)), " ",
    el("span", { class: "quiet expires" }, visible(expiry(a))),
    a.profile_line ? el("div", {}, "To allow it for good, add to the profile: ", el("code", { class: "profile-line" }, visible(a.profile_line))) : null,
    el("div", { class: "actions" }, reason,
      el("button", { class: "primary allow-once", onclick: decide("allow_once") }, "Allow once"),
      el("button", { class: "allow-session", onclick: decide("allow_session") }, "Allow for this session"),
      el("button", { class: "danger deny", onclick: decide("deny") }, "Deny")),
    out);
}

// ---------- the diff ----------

// Changes under a directory git ignores (a virtualenv, node_modules, build output) are one row:
// reviewed, and applied, whole or not at all.
function treesOf(diff) {
  if (Array.isArray(diff.trees)) return diff.trees;
  return [];
}

async function loadDiff(s, into, feedback) {
  const path = `/v1/sessions/${encodeURIComponent(s.id)}/diff`;
  if (s.status !== "idle") {
    into.replaceChildren(el("p", { class: "quiet" }, `The session is ${s.status}: its changes are shown when no run is going.`),
      el("button", { onclick: () => loadDiff(s, into, feedback).catch(shown) }, "Look again"));
    return;
  }
  const [list, patch] = await Promise.all([api("GET", path), api("GET", path, null, "text/x-diff")]);
  if (!list.ok) return into.replaceChildren(message("bad", problem(list)));
  const d = list.data;
  const changes = d.changes || [];
  const known = new Set(changes.map((c) => c.path));
  const chunks = patch.ok && typeof patch.data === "string" ? splitPatch(patch.data, known) : {};
  // The list and the patch are two answers: if the session changed between them, what is shown
  // is not one change set, and the person reads it again.
  const patchDigest = patch.headers && patch.headers.get("airlock-digest");
  if (patch.ok && patchDigest && d.digest && patchDigest !== d.digest) {
    into.replaceChildren(message("bad", "The session changed while its changes were read: read them again."),
      el("button", { id: "reload", onclick: () => loadDiff(s, into, feedback).catch(shown) }, "Reload changes"));
    return;
  }
  const trees = treesOf(d);
  if (changes.length === 0 && trees.length === 0) {
    into.replaceChildren(el("p", { class: "quiet" }, "The session changed nothing."), sessionActions(s, into, feedback, d, []));
    return;
  }
  const boxes = [];
  const files = changes.map((c) => fileView(c, chunks[c.path], boxes));
  const patchFailed = !patch.ok ? message("bad", `The changes' content could not be shown (${problem(patch)}): files whose content is not shown are not ticked.`) : null;
  const treeRows = trees.map((t) => treeView(t, boxes));
  into.replaceChildren(...present([
    d.digest ? el("p", { class: "digest" }, "You review change set ", el("code", { id: "digest" }, d.digest),
      ": an apply writes exactly it, or nothing if the session changed since.") : null,
    patchFailed,
    el("p", { class: "quiet" }, `${changes.length} changes${trees.length ? `, ${trees.length} ignored trees` : ""}. Ticked paths are applied; a hazard is applied only when you tick it.`),
    files, treeRows,
    sessionActions(s, into, feedback, d, boxes)]));
}

// `diff --git a/P b/P` starts each file's part of a patch (both halves name the same path, quoted
// alike when it needs quoting): the path is the first half, found by length, never by searching
// for " b/" (a path may hold that). A header that does not split so is not a file's start.
function splitPatch(text, known) {
  const chunks = {};
  let current = null;
  for (const line of text.split("\n")) {
    const path = line.startsWith("diff --git ") ? headerPath(line.slice(11)) : null;
    if (path !== null && known.has(path)) {
      current = [];
      chunks[path] = current;
    }
    if (current) current.push(line);
  }
  return chunks;
}

function headerPath(rest) {
  if (rest.length % 2 === 0) return null;
  const half = (rest.length - 1) / 2;
  const a = rest.slice(0, half), b = rest.slice(half + 1);
  if (rest[half] !== " ") return null;
  if (a.startsWith('"a/') && b.startsWith('"b/') && a.slice(3) === b.slice(3)) return unquote(a.slice(3, -1));
  if (a.startsWith("a/") && b.startsWith("b/") && a.slice(2) === b.slice(2)) return a.slice(2);
  return null;
}

// git's quoting: C escapes, and \NNN octal for each byte of a name that is not ASCII (UTF-8).
function unquote(path) {
  const bytes = [];
  const simple = { n: 10, t: 9, r: 13, a: 7, b: 8, f: 12, v: 11, '"': 34, "\\": 92 };
  for (let i = 0; i < path.length; i++) {
    const c = path[i];
    if (c !== "\\") {
      bytes.push(...new TextEncoder().encode(c));
      continue;
    }
    const next = path[i + 1];
    if (/[0-7]/.test(next)) {
      bytes.push(parseInt(path.slice(i + 1, i + 4), 8));
      i += 3;
    } else {
      bytes.push(simple[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

function describeSide(c) {
  const bits = [];
  const o = c.old, n = c.new;
  if (c.status) bits.push(el("span", { class: "pill" }, c.status));
  if (n && n.kind && n.kind !== "file") bits.push(el("span", { class: "pill" }, n.kind));
  if (n && n.target) bits.push(el("span", { class: "pill warn" }, "→ ", visible(n.target)));
  if (o && n && o.mode !== undefined && n.mode !== undefined && o.mode !== n.mode)
    bits.push(el("span", { class: "pill warn" }, `mode ${o.mode.toString(8)} → ${n.mode.toString(8)}`));
  else if (n && n.mode !== undefined && (n.mode & 0o111)) bits.push(el("span", { class: "pill warn" }, `executable ${n.mode.toString(8)}`));
  if (n && n.size !== undefined) bits.push(el("span", { class: "quiet" }, `${n.size} bytes`));
  return bits;
}

function fileView(c, chunk, boxes) {
  const hazards = c.hazards || [];
  // A file whose content the page could not show is not ticked: applying it is applying unseen.
  // Binary content is not shown either.
  const binary = Boolean(chunk) && chunk.some((l) => l.startsWith("Binary files") || l.startsWith("GIT binary patch"));
  const unseen = (!chunk || binary) && c.status !== "deleted" && !(c.new && c.new.kind === "dir");
  const box = el("input", { type: "checkbox", class: "pick", "data-path": c.path, "data-hazard": hazards.length ? "1" : "0", checked: hazards.length === 0 && !c.ignored && !unseen });
  boxes.push(box);
  const body = [];
  if (chunk) {
    if (binary) body.push(el("p", { class: "bad unseen" }, "A binary file: its content is not shown, so it is not ticked; ticking it applies it unseen."));
    else {
      // The file's header lines come before its first hunk; after it, every line is content
      // (an added line "++ x" reads "+++ x", and is shown).
      let inHunks = false;
      for (const line of chunk.slice(1)) {
        if (!inHunks && !line.startsWith("@@")) {
          if (/^(new|deleted) file mode|^old mode|^new mode/.test(line)) body.push(el("pre", { class: "line-hunk" }, visible(line)));
          continue;
        }
        inHunks = true;
        if (line === "") continue;
        const cls = line.startsWith("@@") ? "line-hunk" : line.startsWith("+") ? "line-add" : line.startsWith("-") ? "line-del" : "";
        body.push(el("pre", { class: cls }, visible(line)));
      }
    }
  } else {
    body.push(unseen
      ? el("p", { class: "bad unseen" }, "Its content is not shown (the patch could not hold it): it is not ticked, and ticking it applies it unseen. 'airlock diff' at the machine shows it.")
      : el("p", { class: "quiet" }, c.status === "deleted" ? "deleted" : "a directory"));
  }
  return el("div", { class: `file${hazards.length ? " hazard" : ""}`, "data-path": c.path },
    el("div", { class: "head" }, el("label", {}, box, " ", el("code", {}, visible(c.path))), describeSide(c),
      c.ignored ? el("span", { class: "pill" }, "ignored by git") : null),
    hazards.map((h, i) => el("div", { class: "hz" }, "⚠ ", visible(hazardText(h)), c.hazard_notes && c.hazard_notes[i] ? visible(`: ${c.hazard_notes[i]}`) : "")),
    (c.reasons || []).map((r) => el("div", { class: "hz" }, "⚠ ", visible(r))),
    el("div", { class: "body" }, body));
}

function hazardText(h) {
  if (typeof h === "string") return h;
  return [h.kind, h.reason || h.why || h.message].filter(Boolean).join(": ") || JSON.stringify(h);
}

function treeView(t, boxes) {
  const box = el("input", { type: "checkbox", class: "pick tree-pick", "data-path": t.root, "data-hazard": t.hazards ? "1" : "0", checked: false });
  boxes.push(box);
  const counts = Object.entries(t.hazard_counts || {}).map(([kind, n]) => `${kind} ${n}`).join(", ");
  const executables = t.executable_paths || [];
  const hazardous = t.hazard_paths || [];
  const more = (shown, all) => (all > shown ? ` (the first ${shown} of ${all})` : "");
  return el("div", { class: `file tree${t.hazards ? " hazard" : ""}`, "data-path": t.root },
    el("div", { class: "head" }, el("label", {}, box, " ", el("code", {}, visible(`${t.root}/`))),
      el("span", { class: "pill" }, "a tree git ignores: applied whole or not at all, when ticked"),
      el("span", { class: "quiet" }, `${t.files} files, ${t.dirs} dirs, ${t.executables} executables, ${t.bytes} bytes${t.deleted ? `, ${t.deleted} deleted` : ""}`)),
    t.hazards ? el("div", { class: "hz" }, "⚠ ", `${t.hazards} hazards: ${counts}. Ticking the tree allows them.`) : null,
    el("div", { class: "body" },
      executables.length ? el("div", {}, el("div", { class: "quiet" }, `executables${more(executables.length, t.executables)}`), el("pre", {}, visible(executables.join("\n")))) : null,
      hazardous.length ? el("div", {}, el("div", { class: "quiet" }, `hazardous paths${more(hazardous.length, t.hazards)}`),
        el("pre", {}, visible(hazardous.map((h) => `${h.path}  ${(h.hazards || []).join(", ")}`).join("\n")))) : null));
}

function sessionActions(s, into, feedback, d, boxes) {
  const path = `/v1/sessions/${encodeURIComponent(s.id)}`;
  const report = el("div", { id: "report" });
  const apply = async () => {
    const picked = boxes.filter((b) => b.checked);
    if (picked.length === 0) return report.replaceChildren(message("bad", "Tick at least one path."));
    const body = {
      paths: picked.map((b) => b.dataset.path),
      allow_hazards: picked.filter((b) => b.dataset.hazard === "1").map((b) => b.dataset.path),
    };
    if (d.digest) body.reviewed = d.digest;
    const answer = await api("POST", `${path}/apply`, body);
    report.replaceChildren(applyReport(answer));
  };
  const revert = async () => {
    const answer = await api("POST", `${path}/revert`, {});
    report.replaceChildren(answer.ok ? message("ok", "Reverted: the workspace is as it was before the last apply.") : message("bad", problem(answer)));
  };
  const discard = async () => {
    if (!window.confirm("Discard this session and everything it changed?")) return;
    const answer = await api("POST", `${path}/discard`, {});
    report.replaceChildren(answer.ok ? message("ok", "Discarded.") : message("bad", problem(answer)));
  };
  return el("div", {},
    el("div", { class: "actions" },
      el("button", { class: "primary", id: "apply", onclick: () => apply().catch(shown) }, "Apply ticked"),
      el("button", { id: "revert", onclick: () => revert().catch(shown) }, "Revert last apply"),
      el("button", { class: "danger", id: "discard", onclick: () => discard().catch(shown) }, "Discard session"),
      el("button", { id: "reload", onclick: () => loadDiff(s, into, feedback).catch(shown) }, "Reload changes")),
    report);
}

function applyReport(answer) {
  if (!answer.ok && answer.status !== 409) return message("bad", problem(answer));
  if (answer.status === 409 && !(answer.data && answer.data.items)) return message("bad", problem(answer));
  // A tree's paths are one row: the tree's outcome.
  const items = (answer.data.items || []).filter((i) => !i.tree);
  const row = (path, result, reason) => el("tr", { "data-result": result }, el("td", {}, el("code", {}, visible(path))), el("td", {}, visible(result)), el("td", {}, visible(reason || "")));
  const rows = items.map((i) => row(i.path || "", i.result || "", i.reason))
    .concat((answer.data.trees || []).map((t) => row(`${t.root}/ (${t.paths} paths)`, t.result || "", t.reason)));
  return el("div", {},
    message(answer.status === 200 ? "ok" : "bad", answer.status === 200 ? "Applied." : "Some changes were left out: see why below."),
    el("table", { id: "applied" }, el("tbody", {}, rows)));
}

// ---------- the audit log, live (server-sent events) ----------

function follow(id, log, runs, approvals) {
  if (following) following.abort();
  const stop = new AbortController();
  following = stop;
  const since = new Date(Date.now() - 60 * 60 * 1000).toISOString();
  const path = `/v1/audit?session=${encodeURIComponent(id)}&follow=true&since=${encodeURIComponent(since)}`;
  let refresh = null;
  const onRecord = (record) => {
    log.prepend(el("tr", {},
      el("td", { class: "quiet" }, when(record.time)),
      el("td", { class: "mono" }, visible(record.action)),
      el("td", {}, el("pre", {}, visible(summaryOf(record))))));
    while (log.children.length > 500) log.lastChild.remove();
    // Runs and approvals shown again soon after a record that changes them.
    if (/^(run|approval)/.test(record.action) && !refresh) {
      refresh = setTimeout(() => {
        refresh = null;
        loadRuns(id, runs).catch(shown);
        loadApprovals(id, approvals).catch(shown);
      }, 300);
    }
  };
  // Server-sent events, read with fetch: EventSource cannot send the login's secret.
  (async () => {
    const response = await fetch(path, {
      headers: { Accept: "text/event-stream", "X-Airlock-CSRF": csrf || "" },
      credentials: "same-origin",
      signal: stop.signal,
    });
    if (!response.ok || !response.body) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      pending += value;
      let end;
      while ((end = pending.indexOf("\n\n")) >= 0) {
        const event = pending.slice(0, end);
        pending = pending.slice(end + 2);
        const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        try { onRecord(JSON.parse(data)); } catch { /* not a record */ }
      }
    }
  })().catch(() => {});
}

function summaryOf(r) {
  const skip = new Set(["hash", "prev", "seq", "time", "action", "by", "session"]);
  const text = Object.entries(r).filter(([k]) => !skip.has(k)).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
  // A long record (an apply's every path) is cut here; airlock log and GET /v1/audit have it whole.
  return text.length > 600 ? `${text.slice(0, 600)} …` : text;
}

// ---------- start ----------

function shown(error) {
  if (error && error.message === "login required") return;
  main().prepend(message("bad", `Something went wrong: ${error}`));
}

async function route() {
  if (following && !location.hash.startsWith("#/s/")) {
    following.abort();
    following = null;
  }
  if (watching && !location.hash.startsWith("#/s/")) {
    clearInterval(watching);
    watching = null;
  }
  if (!who) return;
  const m = location.hash.match(/^#\/s\/(.+)$/);
  if (m) return sessionView(decodeURIComponent(m[1]));
  return sessionsView();
}

async function start() {
  // A one-time link: its code is after #code= (never sent to a server by the browser), used
  // once and taken out of the address bar and the history at once.
  const code = location.hash.match(/^#code=([0-9a-f]+)$/);
  if (code) {
    history.replaceState(null, "", "/#/");
    const status = el("div");
    show(el("h1", {}, "Logging in…"), status);
    if (!(await logIn({ code: code[1] }, status))) return;
    return route();
  }
  if (!csrf) return showLogin();
  const me = await api("GET", "/v1/login");
  if (!me.ok) return showLogin();
  loggedIn(me.data);
  return route();
}

window.addEventListener("hashchange", () => route().catch(shown));
document.addEventListener("DOMContentLoaded", () => start().catch(shown));
