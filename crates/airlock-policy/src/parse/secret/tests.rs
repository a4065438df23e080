use std::path::{Path, PathBuf};

use super::super::parse_profile;
use crate::error::PolicyError;
use crate::profile::{Injection, SecretSource};

const ORIGIN: &str = "/etc/airlock/profiles/ci.toml";
const NET: &str = "network = { allow = [\"api.github.com\", \"github.com\", \"*.example.com\"] }\n";

fn parse(text: &str) -> Result<crate::Profile, PolicyError> {
    parse_profile(text, "ci", Path::new(ORIGIN))
}

/// The error of `text`, which must be at `line` and start with `message`.
#[track_caller]
fn refused(text: &str, line: usize, message: &str) {
    match parse(text) {
        Err(PolicyError::Invalid {
            path,
            line: l,
            message: m,
            hint,
            ..
        }) => {
            assert_eq!(path, Path::new(ORIGIN));
            assert!(
                l == line && m.starts_with(message),
                "{text}\n got {l}: {m}\n want {line}: {message}"
            );
            assert!(!hint.is_empty());
        }
        other => panic!("{text}: {other:?}"),
    }
}

fn secret(body: &str) -> String {
    format!("{NET}\n[[secret]]\n{body}")
}

const GOOD: &str = "name = \"GITHUB_TOKEN\"\nfrom = { env = \"CI_BOT_GITHUB_TOKEN\" }\nhosts = [\"API.github.com\", \"github.com\"]\ninject = { header = \"Authorization\", format = \"Bearer {}\" }\n";

#[test]
fn a_full_secret_parses() {
    let p = parse(&secret(GOOD)).unwrap();
    assert_eq!(p.secrets.len(), 1);
    let s = &p.secrets[0];
    assert_eq!(s.name, "GITHUB_TOKEN");
    assert_eq!(s.source, SecretSource::Env("CI_BOT_GITHUB_TOKEN".into()));
    assert_eq!(s.hosts, ["api.github.com", "github.com"]);
    assert_eq!(
        s.inject,
        Injection::Header {
            name: "Authorization".into(),
            format: "Bearer {}".into()
        }
    );
    assert!(parse(NET).unwrap().secrets.is_empty());
}

#[test]
fn every_source_and_injection() {
    let secrets = [
        "[[secret]]\nname = \"A\"\nfrom = { file = \"/etc/airlock//secrets/./a\" }\nhosts = [\"x.example.com\"]\ninject = { basic = \"x-access-token\" }\n",
        "[[secret]]\nname = \"B\"\nfrom = { command = [\"pass\", \"show\", \"b\"] }\nhosts = [\"github.com\"]\ninject = { query = \"access_token\" }\n",
        "[[secret]]\nname = \"_C1\"\nfrom = { env = \"C\" }\nhosts = [\"github.com\"]\ninject = \"placeholder\"\n",
        "[[secret]]\nname = \"D\"\nfrom = { env = \"D\" }\nhosts = [\"github.com\"]\ninject = { header = \"X-Api-Key\" }\n",
    ];
    let text = format!("{NET}{}", secrets.concat());
    let p = parse(&text).unwrap();
    let s = &p.secrets;
    assert_eq!(
        s[0].source,
        SecretSource::File(PathBuf::from("/etc/airlock/secrets/a"))
    );
    assert_eq!(
        s[0].inject,
        Injection::Basic {
            username: "x-access-token".into()
        }
    );
    assert_eq!(
        s[1].source,
        SecretSource::Command(vec!["pass".into(), "show".into(), "b".into()])
    );
    assert_eq!(
        s[1].inject,
        Injection::Query {
            param: "access_token".into()
        }
    );
    assert_eq!(
        s[2].inject,
        Injection::Placeholder {
            headers: Vec::new()
        }
    );
    assert_eq!(
        s[3].inject,
        Injection::Header {
            name: "X-Api-Key".into(),
            format: "{}".into()
        }
    );
    // The [network] section may come after the secrets.
    let later =
        format!("[[secret]]\n{GOOD}\n[network]\nallow = [\"github.com\", \"api.github.com\"]\n");
    assert_eq!(parse(&later).unwrap().secrets.len(), 1);
}

#[test]
fn bad_names() {
    for bad in ["1TOKEN", "GH-TOKEN", "", "A B", "É"] {
        refused(
            &secret(&GOOD.replace("GITHUB_TOKEN", bad)),
            4,
            "`name` in [[secret]]: ",
        );
    }
    let twice = format!("{}\n[[secret]]\n{GOOD}", secret(GOOD));
    refused(
        &twice,
        10,
        "two [[secret]] entries are named `GITHUB_TOKEN`",
    );
    let set = format!("{}[env]\nset = {{ GITHUB_TOKEN = \"x\" }}\n", secret(GOOD));
    refused(
        &set,
        4,
        "`name` in [[secret]]: `GITHUB_TOKEN` is also set by [env] set",
    );
}

#[test]
fn bad_sources() {
    let with = |from: &str| secret(&GOOD.replace("{ env = \"CI_BOT_GITHUB_TOKEN\" }", from));
    refused(&with("{}"), 5, "`from` in [[secret]] names no sources");
    refused(
        &with("{ env = \"A\", file = \"/a\" }"),
        5,
        "`from` in [[secret]] names several sources",
    );
    refused(
        &with("{ vault = \"a\" }"),
        5,
        "unknown key `vault` in [secret.from]",
    );
    refused(&with("\"A\""), 5, "`from` in [secret] must be a table");
    refused(
        &with("{ file = \"secrets/gh\" }"),
        5,
        "`file` in [secret.from]: `secrets/gh` is not an absolute path",
    );
    refused(
        &with("{ file = \"/a/../b\" }"),
        5,
        "`file` in [secret.from]: `/a/../b` is not an absolute path",
    );
    refused(
        &with("{ command = [] }"),
        5,
        "`command` in [secret.from] names no program",
    );
    refused(
        &with("{ command = [\"\"] }"),
        5,
        "`command` in [secret.from] names no program",
    );
    refused(
        &with("{ env = \"A-B\" }"),
        5,
        "`env` in [secret.from]: `A-B` is not an environment variable name",
    );
    for allow in ["\"CI_BOT_GITHUB_TOKEN\"", "\"CI_*\"", "\"*\""] {
        let text = format!(
            "{}[env]\nallow = [{allow}]\n",
            with("{ env = \"CI_BOT_GITHUB_TOKEN\" }")
        );
        refused(
            &text,
            5,
            "`env` in [secret.from]: `CI_BOT_GITHUB_TOKEN` passes into the sandbox",
        );
    }
}

#[test]
fn bad_hosts() {
    let with = |hosts: &str| secret(&GOOD.replace("[\"API.github.com\", \"github.com\"]", hosts));
    refused(&with("[]"), 6, "`hosts` in [[secret]] is empty");
    for bad in [
        "10.0.0.1",
        "*.example.com",
        "github.com:443",
        "https://github.com",
        "a..b",
        "::1",
    ] {
        refused(
            &with(&format!("[\"{bad}\"]")),
            6,
            "an entry of `hosts` in [[secret]]: ",
        );
    }
    refused(
        &with("[\"github.com\",\n \"evil.test\"]"),
        7,
        "an entry of `hosts` in [[secret]]: `evil.test` is not allowed by [network]",
    );
    // A wildcard in [network] allows the names under it.
    assert!(parse(&with("[\"a.example.com\"]")).is_ok());
    let denied = format!(
        "[network]\nopen = true\ndeny = [\"github.com\"]\n[[secret]]\n{}",
        GOOD.replace("\"API.github.com\", ", "")
    );
    refused(&denied, 7, "an entry of `hosts` in [[secret]]: `github.com` is not allowed by [network] (deny github.com)");
    refused(
        &format!("[[secret]]\n{GOOD}"),
        1,
        "[[secret]] with network = \"none\"",
    );
    refused(
        &format!("network = \"none\"\n[[secret]]\n{GOOD}"),
        2,
        "[[secret]] with network = \"none\"",
    );
}

#[test]
fn bad_injections() {
    let with = |inject: &str| {
        secret(&GOOD.replace(
            "{ header = \"Authorization\", format = \"Bearer {}\" }",
            inject,
        ))
    };
    refused(
        &with("\"everywhere\""),
        7,
        "`inject` in [[secret]] is not a way to inject",
    );
    refused(
        &with("{}"),
        7,
        "`inject` in [[secret]] names no way to inject",
    );
    refused(
        &with("{ header = \"A\", basic = \"u\" }"),
        7,
        "`inject` in [[secret]] names more than one",
    );
    refused(
        &with("{ format = \"{}\" }"),
        7,
        "`inject` in [[secret]] has a `format` but no `header`",
    );
    refused(
        &with("{ cookie = \"a\" }"),
        7,
        "unknown key `cookie` in [secret.inject]",
    );
    for format in ["Bearer", "{} {}", "Bearer {}\\n"] {
        refused(
            &with(&format!(
                "{{ header = \"Authorization\", format = \"{format}\" }}"
            )),
            7,
            "`format` in [secret.inject]: ",
        );
    }
    for header in ["Auth orization", "", "X:Y", "Ünï"] {
        refused(
            &with(&format!("{{ header = \"{header}\" }}")),
            7,
            "`header` in [secret.inject]: ",
        );
    }
    refused(
        &with("{ basic = \"a:b\" }"),
        7,
        "`basic` in [secret.inject]: ",
    );
    refused(
        &with("{ query = \"a&b\" }"),
        7,
        "`query` in [secret.inject]: ",
    );
    refused(&with("{ query = \"\" }"), 7, "`query` in [secret.inject]: ");
    refused(
        &with("{ placeholder = [\"A B\"] }"),
        7,
        "an entry of `placeholder` in [secret.inject]: `A B` is not a header name",
    );
    refused(
        &with("{ placeholder = [\"Host\"] }"),
        7,
        "an entry of `placeholder` in [secret.inject]: `Host` says how the request is routed",
    );
    refused(
        &with("{ placeholder = [\"X\"], header = \"A\" }"),
        7,
        "`inject` in [[secret]] names more than one way to inject",
    );
}

#[test]
fn placeholder_mode_names_the_headers_besides_the_credential_ones() {
    let with = |inject: &str| {
        parse(&secret(&GOOD.replace(
            "{ header = \"Authorization\", format = \"Bearer {}\" }",
            inject,
        )))
        .unwrap()
    };
    let s = with("{ placeholder = [\"PRIVATE-TOKEN\", \"private-token\", \"X-Api-Key\"] }");
    assert_eq!(
        s.secrets[0].inject,
        Injection::Placeholder {
            headers: vec!["PRIVATE-TOKEN".into(), "X-Api-Key".into()]
        }
    );
    let s = with("\"placeholder\"");
    assert_eq!(
        s.secrets[0].inject,
        Injection::Placeholder {
            headers: Vec::new()
        }
    );
}

#[test]
fn missing_and_unknown_keys() {
    for key in ["name", "from", "hosts", "inject"] {
        let body: String = GOOD
            .lines()
            .filter(|l| !l.starts_with(key))
            .map(|l| format!("{l}\n"))
            .collect();
        match parse(&secret(&body)) {
            Err(PolicyError::Invalid { message, .. }) => {
                assert_eq!(message, format!("a [[secret]] has no `{key}`"))
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    refused(
        &secret(&format!("{GOOD}value = \"x\"\n")),
        8,
        "unknown key `value` in [secret]",
    );
    refused(
        &format!("{NET}secret = 1\n"),
        2,
        "`secret` must be an array",
    );
}
