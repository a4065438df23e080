//! What a browser can be made to send to `airlock serve`, now that one may hold an operator's
//! login (the review page's cookie): a page of another origin posting a form or a `text/plain`
//! body, a DNS-rebinding name, a null Origin, a cookie without the page's CSRF token; and `/mcp`
//! from a page. Each is refused by the server, with the request that must pass beside it. (The
//! same attacks from a real browser: scripts/test-review.sh.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};

use support::api::{
    agent_token, assert_ok, assert_refused, audit_of, operator_token, Addr, Client, Server,
};
use support::*;

/// The server's own origin, as its page has it.
fn origin(server: &Server) -> String {
    match &server.addr {
        Addr::Tcp(addr) => format!("http://{addr}"),
        Addr::Unix(_) => unreachable!("these tests listen on TCP"),
    }
}

/// Whether the token's profile is disabled now.
fn disabled(op: &Client) -> bool {
    let status = assert_ok(&op.get("/v1/status"));
    status["switches"]["profiles"]
        .as_object()
        .is_some_and(|profiles| !profiles.is_empty())
        || !status["switches"]["all"].is_null()
}

/// A page login with `body`: the cookie's `name=value` and the login's answer.
fn log_in(server: &Server, body: &Value) -> (String, Value) {
    let reply = server
        .anonymous()
        .send("POST", "/v1/login", &[], body.to_string().as_bytes());
    let answer = assert_ok(&reply);
    let cookie = reply.header("set-cookie").expect("a cookie").to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_string();
    (pair, answer)
}

both_modes!(
    a_foreign_page_changes_nothing_whatever_it_sends,
    |w: &World| {
        let operator = operator_token(w);
        let server = Server::start_tcp(w, &[]);
        let op = server.client(&operator.token);
        let ours = origin(&server);
        let disable = json!({ "reason": "from a foreign page" }).to_string();
        // A foreign origin, a null one (a sandboxed frame, a data: page), our own on another port:
        // refused, with a token or without.
        for foreign in ["http://attacker.example", "null", "http://127.0.0.1:1"] {
            let reply = op.send(
                "POST",
                "/v1/disable",
                &[("Origin", foreign)],
                disable.as_bytes(),
            );
            assert_refused(&reply, 403, "origin_forbidden");
        }
        let reply = op.send(
            "POST",
            "/v1/disable",
            &[("Sec-Fetch-Site", "cross-site")],
            disable.as_bytes(),
        );
        assert_refused(&reply, 403, "origin_forbidden");
        // The bodies a browser sends cross-site without asking first: a form, text/plain.
        for kind in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let reply = op.send(
                "POST",
                "/v1/disable",
                &[("Content-Type", kind)],
                disable.as_bytes(),
            );
            assert_refused(&reply, 415, "unsupported_media_type");
        }
        assert!(
            !disabled(&op),
            "nothing above may have disabled the profile"
        );
        // Our own origin, and a client that is not a browser (no Origin), pass.
        let reply = op.send(
            "POST",
            "/v1/disable",
            &[("Origin", ours.as_str())],
            disable.as_bytes(),
        );
        assert_ok(&reply);
        assert!(disabled(&op));
        assert_ok(&op.post("/v1/enable", &json!({})));
        assert!(!disabled(&op));
        // Reading is not refused for an Origin: no answer is shared with another origin (no CORS).
        assert_ok(&op.send(
            "GET",
            "/v1/sessions",
            &[("Origin", "http://attacker.example")],
            b"",
        ));
    }
);

both_modes!(a_rebinding_name_reaches_nothing, |w: &World| {
    let operator = operator_token(w);
    let server = Server::start_tcp(w, &["--host-name", "airlock.internal"]);
    let op = server.client(&operator.token);
    let Addr::Tcp(addr) = server.addr.clone() else {
        unreachable!()
    };
    let port = addr.port();
    for name in [
        format!("attacker.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        String::new(),
    ] {
        let reply = op.send("GET", "/v1/sessions", &[("Host", name.as_str())], b"");
        assert_refused(&reply, 421, "host_not_allowed");
        let page = op.send("GET", "/", &[("Host", name.as_str())], b"");
        assert_eq!(page.status, 421, "the page through {name:?}");
    }
    for name in [
        format!("localhost:{port}"),
        format!("airlock.internal:{port}"),
        addr.to_string(),
    ] {
        assert_ok(&op.send("GET", "/v1/sessions", &[("Host", name.as_str())], b""));
    }
});

both_modes!(
    the_page_cookie_needs_its_csrf_token_to_change_anything,
    |w: &World| {
        let operator = operator_token(w);
        let server = Server::start_tcp(w, &[]);
        let (cookie, login) = log_in(&server, &json!({ "token": operator.token }));
        let csrf = login["csrf"].as_str().unwrap().to_string();
        assert_eq!(login["profile"], "default");
        let browser = server.anonymous();
        let with_cookie = [("Cookie", cookie.as_str())];
        let with_secret = [
            ("Cookie", cookie.as_str()),
            ("X-Airlock-CSRF", csrf.as_str()),
        ];
        // The cookie alone opens nothing, not even a read: a page on another port of this host
        // gets it with any request it makes the browser send (cookies are not kept per port).
        let reply = browser.send("GET", "/v1/sessions", &with_cookie, b"");
        assert_refused(&reply, 403, "csrf_refused");
        let reply = browser.send("GET", "/v1/login", &with_cookie, b"");
        assert_refused(&reply, 403, "csrf_refused");
        // With the login's secret: the operator's reach; the secret is never given again.
        assert_ok(&browser.send("GET", "/v1/sessions", &with_secret, b""));
        let me = assert_ok(&browser.send("GET", "/v1/login", &with_secret, b""));
        assert_eq!(me["token_id"], operator.id.as_str());
        assert!(me.get("csrf").is_none(), "{me}");
        // A second cookie of that name (set by a page of another port): refused, and said.
        let tossed = format!("airlock_page=junk; {cookie}");
        let headers = [
            ("Cookie", tossed.as_str()),
            ("X-Airlock-CSRF", csrf.as_str()),
        ];
        let reply = browser.send("GET", "/v1/sessions", &headers, b"");
        assert_refused(&reply, 401, "login_required");
        // Changing without the CSRF token, or with a wrong one: refused, nothing done.
        let disable = json!({ "reason": "csrf" }).to_string();
        for sent in [None, Some("0".repeat(64)), Some(String::new())] {
            let mut headers = vec![("Cookie", cookie.as_str())];
            if let Some(token) = &sent {
                headers.push(("X-Airlock-CSRF", token.as_str()));
            }
            let reply = browser.send("POST", "/v1/disable", &headers, disable.as_bytes());
            assert_refused(&reply, 403, "csrf_refused");
        }
        let op = server.client(&operator.token);
        assert!(!disabled(&op));
        // With it: done.
        let headers = [
            ("Cookie", cookie.as_str()),
            ("X-Airlock-CSRF", csrf.as_str()),
        ];
        assert_ok(&browser.send("POST", "/v1/disable", &headers, disable.as_bytes()));
        assert!(disabled(&op));
        assert_ok(&browser.send("POST", "/v1/enable", &headers, b"{}"));
        // /mcp never takes the cookie.
        let mcp = browser.send(
            "POST",
            "/mcp",
            &[
                ("Cookie", cookie.as_str()),
                ("Accept", "application/json, text/event-stream"),
            ],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        );
        assert_refused(&mcp, 401, "token_missing");
        // Logged out, the cookie opens nothing; revoking the token ends the login too.
        let reply = browser.send("POST", "/v1/logout", &headers, b"");
        assert_eq!(reply.status, 204);
        assert_refused(
            &browser.send("GET", "/v1/sessions", &with_secret, b""),
            401,
            "login_required",
        );
        let (cookie, login) = log_in(&server, &json!({ "token": operator.token }));
        let csrf = login["csrf"].as_str().unwrap();
        let out = w
            .airlock()
            .args(["token", "revoke", &operator.id])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let headers = [("Cookie", cookie.as_str()), ("X-Airlock-CSRF", csrf)];
        let reply = browser.send("GET", "/v1/sessions", &headers, b"");
        assert_refused(&reply, 401, "login_required");
    }
);

both_modes!(
    agents_never_get_a_page_and_a_link_works_once,
    |w: &World| {
        let agent = agent_token(w);
        let operator = operator_token(w);
        let server = Server::start_tcp(w, &[]);
        let reply = server.anonymous().send(
            "POST",
            "/v1/login",
            &[],
            json!({ "token": agent.token }).to_string().as_bytes(),
        );
        assert_refused(&reply, 403, "role_forbidden");
        let reply = server.anonymous().send(
            "POST",
            "/v1/login",
            &[],
            json!({ "token": "airlock_0000000000000000_00" })
                .to_string()
                .as_bytes(),
        );
        assert_refused(&reply, 403, "login_refused");
        // The link `airlock review` prints, for the operator's token: once.
        let out = w
            .airlock()
            .args([
                "review",
                "--json",
                "--url",
                &origin(&server),
                "--token",
                &operator.id,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let link: Value = serde_json::from_slice(&out.stdout).unwrap();
        let url = link["url"].as_str().unwrap();
        let code = url.split_once("#code=").unwrap().1;
        assert!(
            url.starts_with(&format!("{}/login#code=", origin(&server))),
            "{url}"
        );
        assert_eq!(link["token_id"], operator.id.as_str());
        let (_, login) = log_in(&server, &json!({ "code": code }));
        assert_eq!(login["token_id"], operator.id.as_str());
        let again = server.anonymous().send(
            "POST",
            "/v1/login",
            &[],
            json!({ "code": code }).to_string().as_bytes(),
        );
        assert_refused(&again, 403, "login_refused");
        // An agent's token cannot be named for a link; without --url the running server is found.
        let out = w
            .airlock()
            .args(["review", "--token", &agent.id])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(stderr(&out).contains("agent"), "{}", stderr(&out));
        let out = w.airlock().args(["review"]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).starts_with(&format!("{}/login#code=", origin(&server))),
            "{}",
            stdout(&out)
        );
        // Each login and each refusal is on record.
        let logins = audit_of(w, "review.login");
        assert_eq!(logins.len(), 1, "{logins:?}");
        assert_eq!(logins[0]["with"], "link");
        // Refusals are counted into a record a second at most (anyone can be refused).
        let refused: u64 = audit_of(w, "review.refused")
            .iter()
            .filter_map(|r| r["count"].as_u64())
            .sum();
        assert!(refused >= 1, "{:?}", audit_of(w, "review.refused"));
    }
);

both_modes!(mcp_refuses_a_page_of_any_other_origin, |w: &World| {
    let agent = agent_token(w);
    let server = Server::start_tcp(w, &[]);
    let api = server.client(&agent.token);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "page", "version": "1" } }
    })
    .to_string();
    let accept = ("Accept", "application/json, text/event-stream");
    for foreign in ["null", "http://attacker.example", "http://localhost:1"] {
        let reply = api.send(
            "POST",
            "/mcp",
            &[accept, ("Origin", foreign)],
            initialize.as_bytes(),
        );
        assert_refused(&reply, 403, "origin_forbidden");
        let reply = api.send("GET", "/mcp", &[accept, ("Origin", foreign)], b"");
        assert_refused(&reply, 403, "origin_forbidden");
    }
    let ours = origin(&server);
    let reply = api.send(
        "POST",
        "/mcp",
        &[accept, ("Origin", ours.as_str())],
        initialize.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = api.send("POST", "/mcp", &[accept], initialize.as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
});

both_modes!(
    every_route_that_changes_something_refuses_another_origin,
    |w: &World| {
        // Every POST the API documents, with an operator's token (which could do each), from a page
        // of another origin, from a null one, and as a form: refused before it is read, nothing done.
        let operator = operator_token(w);
        let server = Server::start_tcp(w, &[]);
        let op = server.client(&operator.token);
        let document: Value =
            serde_json::from_str(include_str!("../../airlock-serve/openapi.json")).unwrap();
        let mut posts = Vec::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            if item.get("post").is_some() {
                posts.push(path.replace("{id}", "nosuchsession"));
            }
        }
        posts.push("/mcp".into());
        assert!(posts.len() >= 15, "{posts:?}");
        for path in &posts {
            for origin in ["http://attacker.example", "null"] {
                let reply = op.send("POST", path, &[("Origin", origin)], b"{}");
                assert_refused(&reply, 403, "origin_forbidden");
            }
            let form = op.send(
                "POST",
                path,
                &[("Content-Type", "application/x-www-form-urlencoded")],
                b"reason=x",
            );
            assert_refused(&form, 415, "unsupported_media_type");
        }
        assert!(!disabled(&op));
        assert!(audit_of(w, "disable").is_empty() && audit_of(w, "session.created").is_empty());
    }
);
