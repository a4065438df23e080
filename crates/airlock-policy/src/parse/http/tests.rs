use std::path::Path;

use super::super::parse_profile;
use crate::error::PolicyError;

const ORIGIN: &str = "/etc/airlock/profiles/ci.toml";
const NET: &str = "[network]\nallow = [\"api.github.com\", \"example.org\"]\n";

fn parse(text: &str) -> Result<crate::Profile, PolicyError> {
    parse_profile(text, "ci", Path::new(ORIGIN))
}

/// The error of `text`, which must be at `line`:`column` and start with `message`.
#[track_caller]
fn refused(text: &str, line: usize, column: usize, message: &str) {
    match parse(text) {
        Err(PolicyError::Invalid {
            path,
            line: l,
            column: c,
            message: m,
            hint,
        }) => {
            assert_eq!(path, Path::new(ORIGIN));
            assert!(
                (l, c) == (line, column) && m.starts_with(message),
                "{text}\n got {l}:{c}: {m}\n want {line}:{column}: {message}"
            );
            assert!(!hint.is_empty());
        }
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn rules_and_inspected_hosts_parse() {
    let p = parse(&format!(
        "{NET}[[network.http]]\nhost = \"API.github.com\"\nallow = [\"GET /repos/acme/*\", \"POST /repos/acme/*/issues\"]\n\n[[network.http]]\nhost = \"example.org\"\ninspect = true\n"
    ))
    .unwrap();
    assert_eq!(p.http.len(), 2);
    assert_eq!(p.http[0].host, "api.github.com");
    let allow: Vec<String> = p.http[0]
        .allow
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    assert_eq!(allow, ["GET /repos/acme/*", "POST /repos/acme/*/issues"]);
    assert_eq!(p.http[1].host, "example.org");
    assert_eq!(p.http[1].allow, None);
    assert!(p.http[0].decide("GET", "/repos/acme/x").allowed);
    assert!(!p.http[0].decide("GET", "/repos/other/x").allowed);
    // inspect = true beside rules says what rules imply.
    let p = parse(&format!(
        "{NET}[[network.http]]\nhost = \"example.org\"\ninspect = true\nallow = [\"GET /\"]\n"
    ))
    .unwrap();
    assert!(p.http[0].allow.is_some());
    // The order of [network]'s keys does not matter; open allows any host.
    parse("[network]\n[[network.http]]\nhost = \"example.org\"\ninspect = true\n[network.x]\n")
        .unwrap_err();
    let p =
        parse("[[network.http]]\nhost = \"example.org\"\ninspect = true\n[network]\nopen = true\n");
    assert_eq!(p.unwrap().http.len(), 1);
    assert!(parse(NET).unwrap().http.is_empty());
}

#[test]
fn mistakes_are_named_with_their_line_and_column() {
    let rules = |body: &str| format!("{NET}[[network.http]]\n{body}");
    // A bad rule: its own column in the array.
    refused(
        &rules("host = \"api.github.com\"\nallow = [\"GET /repos/*\", \"get /x\"]\n"),
        5,
        26,
        "an entry of `allow` in [network.http]: \"get /x\": methods are case-sensitive",
    );
    refused(
        &rules("host = \"api.github.com\"\nallow = [\"GET /repos/../x\"]\n"),
        5,
        10,
        "an entry of `allow` in [network.http]: \"GET /repos/../x\": a `..` segment",
    );
    refused(
        &rules("host = \"api.github.com\"\nallow = [\"GET /repos?page=1\"]\n"),
        5,
        10,
        "an entry of `allow` in [network.http]: \"GET /repos?page=1\": the query",
    );
    refused(
        &rules("host = \"api.github.com\"\nallow = [\"GET /a*\"]\n"),
        5,
        10,
        "an entry of `allow` in [network.http]: \"GET /a*\": `*` stands for a whole segment",
    );
    refused(
        &rules("host = \"other.test\"\nallow = [\"GET /\"]\n"),
        4,
        8,
        "`host` in [[network.http]]: `other.test` is not allowed by [network]",
    );
    refused(
        &rules("host = \"*.github.com\"\ninspect = true\n"),
        4,
        8,
        "`host` in [[network.http]]: `*.github.com` is not a host name",
    );
    refused(
        &rules("host = \"api.github.com:443\"\ninspect = true\n"),
        4,
        8,
        "`host` in [[network.http]]: `api.github.com:443` is not a host name",
    );
    refused(
        &rules("host = \"api.github.com\"\nalow = [\"GET /\"]\n"),
        5,
        1,
        "unknown key `alow` in [network.http]",
    );
    refused(
        &rules("host = \"api.github.com\"\nallow = []\n"),
        5,
        9,
        "`allow` in the [[network.http]] for api.github.com is empty",
    );
    refused(
        &rules("host = \"api.github.com\"\nallow = [\"GET /\"]\ninspect = false\n"),
        6,
        11,
        "`inspect = false` in the [[network.http]] for api.github.com, which has rules",
    );
    refused(
        &rules("host = \"api.github.com\"\ninspect = \"yes\"\n"),
        5,
        11,
        "`inspect` in [network.http]",
    );
    refused(
        &rules("host = \"api.github.com\"\ninspect = true\n\n[[network.http]]\nhost = \"API.github.com\"\ninspect = true\n"),
        7,
        1,
        "two [[network.http]] entries are for `api.github.com`",
    );
    refused(
        &rules("host = \"api.github.com\"\n"),
        3,
        1,
        "the [[network.http]] for api.github.com says nothing",
    );
    refused(
        &rules("allow = [\"GET /\"]\n"),
        3,
        1,
        "a [[network.http]] has no `host`",
    );
    refused(
        "[network]\nallow = []\n[[network.http]]\nhost = \"example.org\"\ninspect = true\n",
        4,
        8,
        "`host` in [[network.http]]: `example.org` is not allowed by [network] (no allow entry names it)",
    );
}
