//! The request rules, over plain request heads.

use super::*;
use zeroize::Zeroizing;

fn head(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = hyper::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

fn other(parts: &Parts) -> String {
    match check(parts, "api.test", 443) {
        Err(Refused::OtherHost { rule, .. }) => rule,
        outcome => panic!("{outcome:?}"),
    }
}

#[test]
fn every_name_a_request_gives_its_host_must_be_the_connections() {
    for ok in ["api.test", "API.TEST", "api.test:443"] {
        assert_eq!(
            check(&head("GET", "/", &[("host", ok)]), "api.test", 443),
            Ok(())
        );
    }
    assert_eq!(
        check(&head("GET", "https://api.test/x", &[]), "api.test", 443),
        Ok(())
    );
    assert!(other(&head("GET", "/", &[("host", "b.test")])).contains("asked for b.test"));
    assert!(other(&head("GET", "/", &[("host", "api.test:8443")])).contains("api.test:8443"));
    assert!(other(&head("GET", "/", &[("host", "x@api.test")])).contains("x@api.test"));
    assert!(other(&head("GET", "/", &[])).contains("names no host"));
    let twice = head("GET", "/", &[("host", "api.test"), ("host", "api.test")]);
    assert!(other(&twice).contains("more than one Host"));
    // HTTP/2's :authority and a Host header must both be it.
    let both = head("GET", "https://api.test/", &[("host", "b.test")]);
    assert!(other(&both).contains("asked for b.test"));
    let both = head("GET", "https://b.test/", &[("host", "api.test")]);
    assert!(other(&both).contains("asked for b.test"));
}

#[test]
fn connect_and_upgrades_are_tunnels() {
    let connect = head("CONNECT", "api.test:443", &[("host", "api.test")]);
    assert!(matches!(
        check(&connect, "api.test", 443),
        Err(Refused::Tunnel(_))
    ));
    let upgrade = head("GET", "/", &[("host", "api.test"), ("upgrade", "h2c")]);
    assert!(
        matches!(check(&upgrade, "api.test", 443), Err(Refused::Tunnel(t)) if t.contains("h2c"))
    );
}

fn secret(name: &str, host: &str, inject: Inject) -> Secret {
    Secret {
        name: name.into(),
        hosts: vec![host.into()],
        placeholder: format!("ph_{name}"),
        value: Zeroizing::new(format!("real_{name}")),
        inject,
    }
}

#[test]
fn a_header_secret_replaces_the_header_and_notes_its_placeholder_elsewhere() {
    let secrets = [secret(
        "A",
        "api.test",
        Inject::Header {
            name: "x-api-key".into(),
            format: "k={}".into(),
        },
    )];
    let mut parts = head(
        "GET",
        "/?q=ph_A",
        &[("x-api-key", "old"), ("x-api-key", "older")],
    );
    let put = inject(&mut parts, &secrets, "api.test").unwrap();
    let values: Vec<_> = parts.headers.get_all("x-api-key").iter().collect();
    assert_eq!(values, ["k=real_A"]);
    assert!(values[0].is_sensitive());
    assert_eq!(
        put,
        Put {
            injected: vec!["A"],
            unreplaced: vec!["A"]
        }
    );
    // A name that is no header name is an error naming the secret, not its value.
    let bad = [secret(
        "B",
        "api.test",
        Inject::Header {
            name: "bad name".into(),
            format: "{}".into(),
        },
    )];
    let why = inject(&mut head("GET", "/", &[]), &bad, "api.test").unwrap_err();
    assert!(why.contains("secret B") && !why.contains("real_B"), "{why}");
}

#[test]
fn a_query_secret_replaces_the_parameter() {
    let secrets = [secret(
        "Q",
        "api.test",
        Inject::Query {
            param: "token".into(),
        },
    )];
    let mut parts = head("GET", "/a/b?token=ph_Q&x=1&token=2", &[]);
    inject(&mut parts, &secrets, "api.test").unwrap();
    assert_eq!(parts.uri.to_string(), "/a/b?x=1&token=real_Q");
    let mut parts = head("GET", "/", &[]);
    inject(&mut parts, &secrets, "api.test").unwrap();
    assert_eq!(parts.uri.to_string(), "/?token=real_Q");
}

#[test]
fn a_placeholder_is_replaced_only_for_its_hosts_and_in_headers() {
    let named = Inject::Placeholder {
        headers: vec!["a".into()],
    };
    let secrets = [
        secret("P", "api.test", named.clone()),
        secret("O", "other.test", named),
    ];
    let mut parts = head("GET", "/?p=ph_P", &[("a", "x ph_P y ph_P"), ("b", "ph_O")]);
    let put = inject(&mut parts, &secrets, "api.test").unwrap();
    assert_eq!(parts.headers["a"], "x real_P y real_P");
    assert_eq!(parts.headers["b"], "ph_O");
    assert_eq!(parts.uri.to_string(), "/?p=ph_P", "not in the target");
    assert_eq!(
        put,
        Put {
            injected: vec!["P"],
            unreplaced: vec!["P", "O"]
        }
    );
    // Nothing seen, nothing noted.
    let put = inject(&mut head("GET", "/", &[]), &secrets, "api.test").unwrap();
    assert_eq!(put, Put::default());
}

#[test]
fn methods_that_reflect_the_request_are_refused() {
    for method in ["TRACE", "TRACK"] {
        let trace = head(method, "/", &[("host", "api.test")]);
        assert!(
            matches!(check(&trace, "api.test", 443), Err(Refused::Reflects(r)) if r.contains(method)),
            "{method}"
        );
    }
    assert_eq!(
        check(
            &head("OPTIONS", "/", &[("host", "api.test")]),
            "api.test",
            443
        ),
        Ok(())
    );
}

#[test]
fn a_placeholder_is_replaced_only_where_credentials_travel() {
    let secrets = [secret("P", "api.test", Inject::placeholder())];
    let echoed = [
        "x-request-id",
        "origin",
        "referer",
        "user-agent",
        "x-forwarded-for",
    ];
    let mut headers: Vec<(&str, &str)> = echoed.iter().map(|name| (*name, "ph_P")).collect();
    headers.extend([
        ("authorization", "Bearer ph_P"),
        ("proxy-authorization", "Bearer ph_P"),
        ("cookie", "a=1; s=ph_P"),
    ]);
    let mut parts = head("GET", "/", &headers);
    let put = inject(&mut parts, &secrets, "api.test").unwrap();
    assert_eq!(parts.headers["authorization"], "Bearer real_P");
    assert_eq!(parts.headers["proxy-authorization"], "Bearer real_P");
    assert_eq!(parts.headers["cookie"], "a=1; s=real_P");
    for name in echoed {
        assert_eq!(
            parts.headers[name], "ph_P",
            "{name}: a header a server may echo"
        );
    }
    assert_eq!(
        put,
        Put {
            injected: vec!["P"],
            unreplaced: vec!["P"]
        }
    );
    // A header the profile names is one more place; its name is matched case-blind.
    let named = [secret(
        "P",
        "api.test",
        Inject::Placeholder {
            headers: vec!["PRIVATE-TOKEN".into()],
        },
    )];
    let mut parts = head("GET", "/", &[("private-token", "ph_P"), ("origin", "ph_P")]);
    inject(&mut parts, &named, "api.test").unwrap();
    assert_eq!(parts.headers["private-token"], "real_P");
    assert_eq!(parts.headers["origin"], "ph_P");
}

#[test]
fn scrubbing_finds_every_form_a_value_went_in_values_and_names() {
    let secrets = [
        secret("H", "api.test", Inject::placeholder()),
        secret(
            "B",
            "api.test",
            Inject::Basic {
                username: "me".into(),
            },
        ),
        secret("O", "other.test", Inject::placeholder()),
    ];
    let mut headers = HeaderMap::new();
    let basic = BASE64.encode("me:real_B");
    headers.insert("a", HeaderValue::from_static("x real_H y real_H"));
    headers.insert(
        "b",
        HeaderValue::from_str(&format!("Basic {basic}")).unwrap(),
    );
    headers.insert("c", HeaderValue::from_static("real_O"));
    headers.insert("x-real_h-echo", HeaderValue::from_static("1"));
    let found = scrub(&mut headers, &secrets, "api.test");
    assert_eq!(found, ["H", "B"]);
    assert_eq!(headers["a"], "x ph_H y ph_H");
    assert_eq!(headers["b"], "Basic ph_B");
    assert_eq!(
        headers["c"], "real_O",
        "never sent to this host, so never looked for"
    );
    assert!(!headers.contains_key("x-real_h-echo"));
    // Nothing found, nothing changed.
    let mut plain = HeaderMap::new();
    plain.insert("a", HeaderValue::from_static("ok"));
    assert!(scrub(&mut plain, &secrets, "api.test").is_empty());
    assert_eq!(plain["a"], "ok");
}
