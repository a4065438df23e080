//! `[network] ask`, `ask_timeout`, `ask_webhook`.

use super::*;

#[test]
fn ask_names_hosts_a_timeout_and_a_webhook() {
    let p = parse(
        "[network]\nallow = [\"pypi.org\"]\nask = [\"*.github.com\", \"api.example.com:443\"]\nask_timeout = \"2m\"\nask_webhook = \"https://n8n.example.com/webhook/airlock\"\n",
    )
    .unwrap();
    let shown: Vec<String> = p.ask.hosts.entries.iter().map(|d| d.to_string()).collect();
    assert_eq!(shown, ["*.github.com", "api.example.com:443"]);
    assert!(!p.ask.hosts.any);
    assert_eq!(p.ask.timeout_seconds, 120);
    assert_eq!(
        p.ask.webhook.as_deref(),
        Some("https://n8n.example.com/webhook/airlock")
    );
    let any = parse("[network]\nask = [\"*\"]\n").unwrap();
    assert!(any.ask.hosts.any);
    assert_eq!(any.ask.timeout_seconds, 60, "the default");
    assert_eq!(
        parse("[network]\nask_timeout = 30\n")
            .unwrap()
            .ask
            .timeout_seconds,
        30
    );
    // Written back by `policy show`, it reads as itself.
    let text = toml::to_string(&crate::to_toml(&p)).unwrap();
    let again = crate::parse_profile(&text, "ci", Path::new(ORIGIN)).unwrap();
    assert_eq!(again.ask, p.ask);
}

#[test]
fn ask_refuses_what_it_cannot_mean() {
    for (text, says) in [
        ("[network]\nask = [\"https://github.com\"]\n", "not a URL"),
        (
            "[network]\nask_timeout = \"2h\"\n",
            "from 1 second to 1 hour",
        ),
        ("[network]\nask_timeout = 0\n", "from 1 second to 1 hour"),
        (
            "[network]\nask_webhook = \"ftp://x\"\n",
            "http:// or https:// URL",
        ),
        (
            "[network]\nask_webhook = \"https://user:pw@x.test/\"\n",
            "no user:password@",
        ),
        (
            "[network]\nopen = true\nask = [\"*\"]\n",
            "nothing would be asked",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
}

#[test]
fn policy_check_says_which_ask_entries_ask_nothing() {
    let p = parse(
        "[network]\nallow = [\"*.github.com\"]\ndeny = [\"evil.test\"]\nask = [\"api.github.com:443\", \"evil.test\", \"pypi.org\"]\n",
    )
    .unwrap();
    let notes = p.ask_notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("allow wins over ask"), "{notes:?}");
    assert!(notes[1].contains("deny wins over ask"), "{notes:?}");
}
