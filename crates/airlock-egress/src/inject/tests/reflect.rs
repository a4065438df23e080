//! Never hand a value back: what reflects a request (TRACE), and every part of an answer's head
//! (headers, redirects, trailers, the reason phrase), over loopback as the other tests serve.

use super::*;

#[test]
fn trace_is_refused_before_a_secret_goes_in_and_the_connection_kept() {
    for alpn in BOTH {
        let inject = Inject::Header {
            name: "Authorization".into(),
            format: "Bearer {}".into(),
        };
        let (echo, injector, upstream_ca) = setup_trusting(
            vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, inject)],
            &[H2, HTTP11],
        );
        // Without the gate: a server that reflects TRACE hands back the credential sent.
        let bearer = format!("Bearer {VALUE}");
        let mut naive = Client::connect(echo.addr, &upstream_ca, Some(HOST), &[alpn]).unwrap();
        let (_, _, body) = naive
            .send(
                "TRACE",
                HOST,
                "/",
                &[("authorization", &bearer)],
                Vec::new(),
            )
            .unwrap();
        assert!(contains(&body, VALUE), "the harm, shown");
        echo.received.lock().unwrap().clear();
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        for method in ["TRACE", "TRACK", "trace"] {
            let (status, headers, body) = client.send(method, HOST, "/", &[], Vec::new()).unwrap();
            assert_eq!(status, 405, "{method}: {body:?}");
            assert!(!contains(&body, VALUE) && !format!("{headers:?}").contains(VALUE));
        }
        assert!(echo.received.lock().unwrap().is_empty(), "nothing sent");
        let (status, body) = client.get(HOST, "/after", &[]).unwrap();
        assert_eq!(status, 200, "the connection is kept: {body}");
        drop(client);
        let (_, events) = through.finish();
        let refused = of_kind(&events, NetEventKind::Tunnel);
        assert_eq!(refused.len(), 3, "{events:?}");
        assert!(
            refused[0]
                .rule
                .contains("TRACE request to api.test asks the server to send the request back"),
            "{}",
            refused[0].rule
        );
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn no_answer_header_carries_an_injected_value_back() {
    for alpn in BOTH {
        let secrets = vec![
            secret_for(
                "Q",
                HOST,
                "ph_query",
                "query value/+&",
                Inject::Query {
                    param: "api_key".into(),
                },
            ),
            secret_for(
                "USER",
                HOST,
                "ph_basic",
                "basic-VALUE-1",
                Inject::Basic {
                    username: "bot".into(),
                },
            ),
            secret_for(
                "KEY",
                HOST,
                "ph_key",
                VALUE,
                Inject::Header {
                    name: "x-api-key".into(),
                    format: "k={}".into(),
                },
            ),
        ];
        let (echo, injector, upstream_ca) = setup_trusting(secrets, &[H2, HTTP11]);
        // Without the gate's scrubbing: a redirect keeps the query, an echo keeps the headers.
        let mut naive = Client::connect(echo.addr, &upstream_ca, Some(HOST), &[alpn]).unwrap();
        let (status, headers, _) = naive
            .send(
                "GET",
                HOST,
                "/reflect/redirect?x=1&api_key=query%20value%2F%2B%26",
                &[("x-api-key", &format!("k={VALUE}"))],
                Vec::new(),
            )
            .unwrap();
        assert_eq!(status, 301);
        let shown = format!("{headers:?}");
        assert!(
            shown.contains("api_key=query%20value%2F%2B%26") && shown.contains(VALUE),
            "the harm, shown: {shown}"
        );
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let (status, headers, _) = client
            .send("GET", HOST, "/reflect/redirect?x=1", &[], Vec::new())
            .unwrap();
        assert_eq!(status, 301);
        assert_eq!(
            headers["location"], "/dir/?x=1&api_key=ph_query",
            "followable: the gate puts the value back"
        );
        assert_eq!(headers["echo-x-api-key"], "k=ph_key");
        let basic = headers["echo-authorization"].to_str().unwrap();
        assert_eq!(basic, "Basic ph_basic", "{basic}");
        let shown = format!("{headers:?}");
        for value in ["query value", "query%20value", "basic-VALUE-1", VALUE] {
            assert!(!shown.contains(value), "{value} in {shown}");
        }
        // The redirect followed: the value goes out again, and still does not come back.
        let (status, headers, body) = client
            .send(
                "GET",
                HOST,
                "/reflect/dir/?x=1&api_key=ph_query",
                &[],
                Vec::new(),
            )
            .unwrap();
        assert_eq!(status, 200);
        assert!(
            contains(&body, "api_key=query%20value%2F%2B%26"),
            "{body:?}"
        );
        assert_eq!(headers["echo-x-api-key"], "k=ph_key");
        drop(client);
        let (_, events) = through.finish();
        let scrubbed: Vec<_> = of_kind(&events, NetEventKind::Placeholder)
            .into_iter()
            .filter(|e| e.rule.contains("carried the value"))
            .collect();
        assert_eq!(scrubbed.len(), 3, "once per secret: {events:?}");
        assert!(!json(&events).contains(VALUE));
    }
}

#[test]
fn no_trailer_carries_an_injected_value_back() {
    let inject = Inject::Header {
        name: "x-api-key".into(),
        format: "k={}".into(),
    };
    let (echo, injector, upstream_ca) = setup_trusting(
        vec![secret_for("KEY", HOST, PLACEHOLDER, VALUE, inject)],
        &[H2],
    );
    // Without the gate: the server echoes the request's headers as trailers.
    let mut naive = Client::connect(echo.addr, &upstream_ca, Some(HOST), &[H2]).unwrap();
    let header = format!("k={VALUE}");
    let (_, headers, _) = naive
        .send(
            "GET",
            HOST,
            "/reflect/trailers",
            &[("x-api-key", &header)],
            Vec::new(),
        )
        .unwrap();
    assert_eq!(
        headers["echo-x-api-key"],
        header.as_str(),
        "the harm, shown"
    );
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client = Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
    let (status, headers, _) = client
        .send("GET", HOST, "/reflect/trailers", &[], Vec::new())
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        headers["echo-x-api-key"],
        format!("k={PLACEHOLDER}").as_str()
    );
    assert!(!format!("{headers:?}").contains(VALUE));
    drop(client);
    let (_, events) = through.finish();
    assert!(
        json(&events).contains("carried the value of secret KEY"),
        "{}",
        json(&events)
    );
}

#[test]
fn no_reason_phrase_carries_an_injected_value_back() {
    let inject = Inject::Header {
        name: "x-api-key".into(),
        format: "k={}".into(),
    };
    let (echo, injector, upstream_ca) = setup_trusting(
        vec![secret_for("KEY", HOST, PLACEHOLDER, VALUE, inject)],
        &[HTTP11],
    );
    // Without the gate: the status line says what the request carried.
    let naive = raw_exchange(
        echo.addr,
        &upstream_ca,
        format!("GET /reflect/reason HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: k={VALUE}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert!(
        naive.starts_with(&format!("HTTP/1.1 200 k={VALUE}\r\n")),
        "the harm, shown: {naive}"
    );
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let got = raw_exchange(
        through.addr,
        injector.ca_pem(),
        format!("GET /reflect/reason HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert!(
        got.starts_with(&format!("HTTP/1.1 200 k={PLACEHOLDER}\r\n")),
        "{got}"
    );
    // The body is the echo's, passed on as it is (a documented limit): the head holds nothing.
    let (head, _) = got.split_once("\r\n\r\n").unwrap();
    assert!(!head.contains(VALUE), "{head}");
    let (_, events) = through.finish();
    assert!(
        json(&events).contains("carried the value of secret KEY"),
        "{}",
        json(&events)
    );
}
