use super::*;

fn rules(allow: &[&str]) -> HttpRules {
    HttpRules {
        host: "api.github.com".into(),
        allow: Some(
            allow
                .iter()
                .map(|r| RequestRule::parse(r).unwrap())
                .collect(),
        ),
    }
}

fn allowed(rules: &HttpRules, method: &str, path: &str) -> bool {
    rules.decide(method, path).allowed
}

#[test]
fn a_star_is_one_whole_segment_and_a_double_star_the_rest() {
    let r = rules(&["GET /repos/acme/*", "POST /repos/acme/*/issues"]);
    for (method, path) in [
        ("GET", "/repos/acme/widgets"),
        ("GET", "/repos/acme/widgets?page=2&x=/../y"),
        ("POST", "/repos/acme/widgets/issues"),
    ] {
        assert!(allowed(&r, method, path), "{method} {path}");
    }
    for (method, path) in [
        // Another method, another path, deeper, shallower, a trailing slash.
        ("DELETE", "/repos/acme/widgets"),
        ("HEAD", "/repos/acme/widgets"),
        ("GET", "/repos/other/widgets"),
        ("GET", "/repos/acme/widgets/issues"),
        ("GET", "/repos/acme"),
        ("GET", "/repos/acme/"),
        ("GET", "/repos/acme/widgets/"),
        ("GET", "/repos/acmeX/widgets"),
        ("POST", "/repos/acme/widgets/issues/1"),
        // Methods are case-sensitive tokens.
        ("get", "/repos/acme/widgets"),
        ("Get", "/repos/acme/widgets"),
        ("GET", "/REPOS/acme/widgets"),
    ] {
        assert!(!allowed(&r, method, path), "{method} {path}");
    }
    let rest = rules(&["* /repos/acme/**", "GET /"]);
    for path in ["/repos/acme/a", "/repos/acme/a/", "/repos/acme/a/b/c"] {
        assert!(allowed(&rest, "PATCH", path), "{path}");
    }
    assert!(allowed(&rest, "GET", "/"));
    assert!(!allowed(&rest, "POST", "/"));
    assert!(!allowed(&rest, "GET", "/repos/acmeX"));
    assert!(!allowed(&rest, "GET", "/repos"));
}

#[test]
fn a_double_star_is_one_segment_or_more_never_the_prefix_itself() {
    // On GitHub, DELETE /repos/acme/widget deletes the repository.
    let r = rules(&["DELETE /repos/acme/widget/**"]);
    for path in [
        "/repos/acme/widget",
        "/repos/acme/widget/",
        "/repos/acme/widgetx",
        "/repos/acme",
    ] {
        assert!(!allowed(&r, "DELETE", path), "{path}");
    }
    for path in [
        "/repos/acme/widget/labels",
        "/repos/acme/widget/labels/",
        "/repos/acme/widget/git/refs/x",
    ] {
        assert!(allowed(&r, "DELETE", path), "{path}");
    }
    assert!(!allowed(&rules(&["GET /**"]), "GET", "/"));
    assert!(allowed(&rules(&["GET /**"]), "GET", "/x"));
}

#[test]
fn a_raw_semicolon_is_refused_unless_a_rule_of_the_host_has_one() {
    let r = rules(&["GET /repos/acme/*", "GET /repos/acme/*/issues"]);
    for path in [
        // Jetty: /repos/acme/; Tomcat and Spring: /repos/acme//issues, then /repos/acme/issues.
        "/repos/acme/;",
        "/repos/acme/;jsessionid=1/issues",
        "/repos/acme/x;a=b",
        "/repos/acme/x;/issues",
    ] {
        let d = r.decide("GET", path);
        assert!(!d.allowed && d.rule.contains("a `;`"), "{path}: {d:?}");
    }
    // Escaped, it is no parameter's start, and is matched as the character it is.
    assert!(allowed(&r, "GET", "/repos/acme/a%3Bb"));
    let with = rules(&["GET /v1;api=2/*"]);
    assert!(allowed(&with, "GET", "/v1;api=2/x"));
    assert!(!allowed(&with, "GET", "/v1;api=3/x"));
}

#[test]
fn path_forms_some_servers_read_differently_are_refused() {
    let r = rules(&["* /**"]);
    for path in [
        // Windows drops trailing dots and spaces.
        "/repos/acme/x.",
        "/repos/acme/..../x",
        "/repos/acme/..%20/x",
        "/repos/acme/.%20/x",
        "/repos/acme/x%20",
        "/repos/acme/x.;a=1/y",
        // Look-alikes of `.`, `/`, `\`, `%`, `;`.
        "/repos/acme/%EF%BC%8E%EF%BC%8E/x",
        "/repos/acme/%E2%80%A4%E2%80%A4/x",
        "/repos/acme/%E2%80%A5/x",
        "/repos/acme/%E2%80%A6/x",
        "/repos/acme/%EF%B9%92%EF%B9%92/x",
        "/repos/acme/a%EF%BC%8Fb",
        "/repos/acme/a%EF%BC%BCb",
        "/repos/acme/a%E2%88%95b",
        "/repos/acme/a%E2%88%96b",
        "/repos/acme/a%E2%A7%B8b",
        "/repos/acme/a%E2%81%84b",
        "/repos/acme/a%EF%B9%A8b",
        "/repos/acme/%EF%BC%852e%EF%BC%852e",
        "/repos/acme/a%EF%BC%9Bb",
    ] {
        let d = r.decide("GET", path);
        assert!(!d.allowed && d.rule.contains("refused"), "{path}: {d:?}");
    }
    for path in [
        "/repos/acme/x.y",
        "/repos/acme/.well-known",
        "/repos/acme/a%20b",
        "/repos/acme/main...feature",
    ] {
        assert!(allowed(&r, "GET", path), "{path}");
    }
    let err = RequestRule::parse("GET /files/x.").unwrap_err().to_string();
    assert!(err.contains("ends in `.`"), "{err}");
}

#[test]
fn paths_servers_could_read_otherwise_are_refused_whatever_the_rules() {
    let r = rules(&["* /**"]);
    for path in [
        "/repos/acme/../other",
        "/repos/acme/..",
        "/repos/acme/./x",
        "/repos/acme/%2e%2e/other",
        "/repos/acme/%2E%2e/other",
        "/repos/acme/.%2e/other",
        "/repos/acme/..;/other",
        "/repos/acme/%2e%2e;x=1/other",
        "/repos/acme/a%2fb",
        "/repos/acme/a%2F..%2Fb",
        "/repos/acme/a%5cb",
        "/repos/acme/a\\..\\b",
        "/repos/acme//x",
        "//evil.test/x",
        "/repos/acme/%252e%252e/x",
        "/repos/acme/%c0%ae%c0%ae/x",
        "/repos/acme/%00",
        "/repos/acme/%0d%0aX:y",
        "/repos/acme/%zz",
        "/repos/acme/%2",
        "/repos/acme/x#frag",
        "/repos/acme/a b",
        "/repos/acme/\u{e9}",
        "*",
        "",
        "repos/acme",
        "https://api.github.com/repos",
    ] {
        let decision = r.decide("GET", path);
        assert!(!decision.allowed, "{path:?}: {decision:?}");
        assert!(decision.rule.contains("refused"), "{path:?}: {decision:?}");
    }
    // Escapes of anything else are read as what they stand for, on both sides.
    let r = rules(&["GET /repos/%61cme/*/issues"]);
    assert!(allowed(&r, "GET", "/repos/acme/x/%69ssues"));
    assert!(allowed(&r, "GET", "/repos/acme/%C3%A9/issues"));
    assert!(allowed(&r, "GET", "/repos/acme/...x/issues"));
    // An escaped `*` in a rule is a literal one.
    let r = rules(&["GET /files/%2A"]);
    assert!(allowed(&r, "GET", "/files/*") && allowed(&r, "GET", "/files/%2a"));
    assert!(!allowed(&r, "GET", "/files/x"));
}

#[test]
fn decisions_name_the_request_and_the_rule() {
    let r = rules(&["GET /repos/acme/*"]);
    assert_eq!(
        r.decide("GET", "/repos/acme/x?token=placeholder").rule,
        "GET /repos/acme/x: allowed by \"GET /repos/acme/*\""
    );
    assert_eq!(
        r.decide("DELETE", "/repos/acme/x").rule,
        "DELETE /repos/acme/x: no rule of [[network.http]] for api.github.com allows it"
    );
    let refused = r.decide("GET", "/repos/acme/%2e%2e/y").rule;
    assert!(
        refused.starts_with("GET /repos/acme/%2e%2e/y: refused, a `..` segment"),
        "{refused}"
    );
    let long = format!("/repos/acme/{}", "x".repeat(1000));
    let rule = r.decide("GET", &long).rule;
    assert!(rule.len() < 400 && rule.contains('…'), "{rule}");
    let inspected = HttpRules {
        host: "example.org".into(),
        allow: None,
    };
    let d = inspected.decide("DELETE", "/anything/../at/all");
    assert!(d.allowed);
    assert_eq!(
        d.rule,
        "DELETE /anything/../at/all: inspected (example.org has no rules)"
    );
}

#[test]
fn rules_that_cannot_mean_what_they_say_do_not_parse() {
    for (text, why) in [
        ("GET", "a method and a path"),
        ("GET /a /b", "a method and a path"),
        ("/repos GET", "not an HTTP method"),
        ("get /repos", "case-sensitive"),
        ("G(T /repos", "not an HTTP method"),
        ("CONNECT /", "tunnels"),
        ("GET /repos?x=1", "query"),
        ("GET /repos#x", "query"),
        ("GET /repos/**/issues", "may only end"),
        ("GET /repos/acme*", "whole segment"),
        ("GET /repos/../x", "`..` segment"),
        ("GET /repos//x", "empty segment"),
        ("GET /repos/%2f", "separator"),
        ("GET repos", "does not start with `/`"),
    ] {
        let err = RequestRule::parse(text).unwrap_err().to_string();
        assert!(err.contains(why), "{text}: {err}");
        assert!(err.starts_with(&format!("{text:?}")), "{err}");
    }
    let rule = RequestRule::parse("  POST   /repos/acme/*/issues ").unwrap();
    assert_eq!(rule.to_string(), "POST /repos/acme/*/issues");
    assert_eq!(
        serde_json::to_value(&rule).unwrap(),
        "POST /repos/acme/*/issues"
    );
    assert!(RequestRule::parse("M-SEARCH /").is_ok());
}

#[test]
fn a_request_that_names_another_method_is_refused_where_rules_apply() {
    let r = rules(&["POST /repos/acme/*/issues"]);
    let target = "/repos/acme/x/issues";
    assert!(
        r.decide_head("POST", target, ["content-type", "accept"], true)
            .allowed
    );
    for header in [
        "X-HTTP-Method-Override",
        "x-http-method",
        "X-Method-Override",
    ] {
        let d = r.decide_head("POST", target, ["accept", header], false);
        assert!(!d.allowed, "{header}");
        assert!(d.rule.contains(header), "{}", d.rule);
    }
    for query in ["_method=DELETE", "a=1&_METHOD=delete", "%5Fmethod=DELETE"] {
        let d = r.decide_head("POST", &format!("{target}?{query}"), [], false);
        assert!(!d.allowed, "{query}");
    }
    assert!(
        r.decide_head("POST", &format!("{target}?method=x&a_method=y"), [], false)
            .allowed
    );
    // The query is left out of the path matched, and of the decision's words.
    let d = r.decide_head("POST", &format!("{target}?token=abc"), [], false);
    assert!(d.allowed && !d.rule.contains("abc"), "{}", d.rule);
    // Inspected only: nothing is refused.
    let inspected = HttpRules {
        host: "example.org".into(),
        allow: None,
    };
    assert!(
        inspected
            .decide_head("DELETE", "/?_method=PUT", ["x-http-method"], true)
            .allowed
    );
}

#[test]
fn method_and_path_overrides_are_refused_as_a_class() {
    let r = rules(&["POST /repos/acme/*/issues"]);
    let target = "/repos/acme/x/issues";
    for header in [
        "x-original-url",
        "X-Rewrite-URL",
        "x-override-url",
        "x_http_method_override",
        "X-HTTP-Method",
    ] {
        let d = r.decide_head("POST", target, [header], false);
        assert!(!d.allowed && d.rule.contains(header), "{header}: {d:?}");
    }
    for query in [
        // As PHP reads them: leading spaces cut, `.`, ` ` and `[` made `_`, cut at NUL.
        ".method=DELETE",
        "%2Emethod=DELETE",
        "+_method=DELETE",
        "%20_method=DELETE",
        "_method%00x=DELETE",
        "_method[]=DELETE",
        "__method=DELETE",
        "_METHOD=DELETE",
        // `;` separates parameters for some servers.
        "a=1;_method=DELETE",
        "_HttpMethod=DELETE",
        "X-HTTP-Method-Override=DELETE",
        "x-http-method=DELETE",
        "x_method_override=DELETE",
        "%5Fmethod",
    ] {
        let d = r.decide_head("POST", &format!("{target}?{query}"), [], false);
        assert!(
            !d.allowed && d.rule.contains("query parameter"),
            "{query}: {d:?}"
        );
    }
    for query in [
        "method=flickr.photos.search",
        "Method=x",
        "payment_method=pm_1",
        "sort_method=x",
        "methods=x",
        "_methodx=1",
        "q=_method",
        "%zz_method",
    ] {
        let d = r.decide_head("POST", &format!("{target}?{query}"), [], false);
        assert!(d.allowed, "{query}: {d:?}");
    }
}

#[test]
fn a_body_on_a_method_without_one_is_refused_where_rules_apply() {
    let r = rules(&["* /repos/acme/*"]);
    for method in ["GET", "HEAD", "OPTIONS", "DELETE", "TRACE"] {
        let d = r.decide_head(method, "/repos/acme/x", [], true);
        assert!(!d.allowed && d.rule.contains("a body"), "{method}: {d:?}");
        assert!(r.decide_head(method, "/repos/acme/x", [], false).allowed);
    }
    for method in ["POST", "PUT", "PATCH", "PROPFIND"] {
        assert!(r.decide_head(method, "/repos/acme/x", [], true).allowed);
    }
    let inspected = HttpRules {
        host: "example.org".into(),
        allow: None,
    };
    assert!(inspected.decide_head("GET", "/", [], true).allowed);
}
