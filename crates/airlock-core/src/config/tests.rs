use super::*;

fn parse_text(text: &str) -> Result<Config, ConfigError> {
    let env = |name: &str| (name == "OTLP_TOKEN").then(|| "Bearer s3cret".to_string());
    parse(Path::new("/etc/airlock/config.toml"), text, &env)
}

fn error(text: &str) -> String {
    parse_text(text).unwrap_err().to_string()
}

#[test]
fn an_empty_file_or_one_without_audit_is_the_default() {
    assert_eq!(parse_text("").unwrap(), Config::default());
    assert_eq!(parse_text("[audit]\n").unwrap(), Config::default());
}

#[test]
fn retention_is_read_in_days_and_a_size_and_refuses_what_keeps_nothing() {
    let config = parse_text("[audit]\nkeep_days = 90\nkeep_size = \"20GiB\"\n").unwrap();
    assert_eq!(
        config.audit.retention,
        airlock_audit::Retention {
            keep_days: Some(90),
            keep_bytes: Some(20 << 30)
        }
    );
    assert!(config.audit.export.is_empty());
    let zero = error("[audit]\nkeep_days = 0\n");
    assert!(
        zero.starts_with("/etc/airlock/config.toml:2:13: keep_days = 0 keeps nothing"),
        "{zero}"
    );
    let size = error("[audit]\nkeep_size = \"lots\"\n");
    assert!(
        size.contains(":2:13: keep_size \"lots\" is not a size; give a size such as"),
        "{size}"
    );
    assert!(error("[audit]\nkeep_size = \"0\"\n").contains("is not a size"));
    assert!(error("[audit]\nkeep_size = 10\n").contains("invalid type"));
}

#[test]
fn stdout_and_otlp_are_read_in_order_with_headers_from_the_environment_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "from-file\n").unwrap();
    // The headers as a table of their own, each source a dotted key: the same as an inline table.
    let text = [
        "[audit]",
        "export = [\"otlp\", \"stdout\"]",
        "[audit.otlp]",
        "endpoint = \"https://collector.example:4318/v1/logs\"",
        "ca_file = \"/etc/airlock/ca.pem\"",
        "[audit.otlp.headers]",
        "Authorization.env = \"OTLP_TOKEN\"",
        "x-tenant = \"team-a\"",
        &format!("x-key.file = \"{}\"", token_file.display()),
    ]
    .join("\n");
    let config = parse_text(&text).unwrap();
    let [Destination::Otlp(otlp), Destination::Stdout] = &config.audit.export[..] else {
        panic!("{config:?}");
    };
    let mut named: Vec<&str> = config.audit.export.iter().map(Destination::name).collect();
    named.sort_unstable();
    let mut every = Destination::NAMES.to_vec();
    every.sort_unstable();
    assert_eq!(named, every, "Destination::NAMES names every destination");
    assert_eq!(
        otlp.endpoint.to_string(),
        "https://collector.example:4318/v1/logs"
    );
    assert_eq!(
        otlp.ca_file.as_deref(),
        Some(Path::new("/etc/airlock/ca.pem"))
    );
    let headers: Vec<(&str, &str)> = otlp
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("authorization", "Bearer s3cret"),
            ("x-key", "from-file"),
            ("x-tenant", "team-a")
        ]
    );
    assert!(
        !format!("{config:?}").contains("s3cret"),
        "a credential in Debug output"
    );
}

#[test]
fn errors_name_the_file_the_line_and_the_fix() {
    assert_eq!(
        error("[audit]\nexport = [\"stdout\", \"splunk\"]\n"),
        "/etc/airlock/config.toml:2:21: unknown export destination \"splunk\"; name \"stdout\" or \"otlp\""
    );
    let unknown = error("[audit]\nexport = []\nexprot = [\"stdout\"]\n");
    assert!(
        unknown.starts_with("/etc/airlock/config.toml:3:1: unknown field `exprot`"),
        "{unknown}"
    );
    let top = error("[audits]\n");
    assert!(
        top.starts_with("/etc/airlock/config.toml:1:2: unknown field `audits`"),
        "{top}"
    );
    let in_otlp = error(
        "[audit]\nexport = [\"otlp\"]\n[audit.otlp]\nendpoint = \"http://c:4318\"\ntimeout = 3\n",
    );
    assert!(
        in_otlp.contains(":5:1: unknown field `timeout`"),
        "{in_otlp}"
    );
    let no_table = error("[audit]\nexport = [\"otlp\"]\n");
    assert!(
        no_table
            .contains(":2:11: \"otlp\" is named in `export` but there is no [audit.otlp] table"),
        "{no_table}"
    );
    let unused = error("[audit]\nexport = [\"stdout\"]\n[audit.otlp]\nendpoint = \"http://c\"\n");
    assert!(unused.contains("does not name \"otlp\""), "{unused}");
    let twice = error("[audit]\nexport = [\"stdout\", \"stdout\"]\n");
    assert!(
        twice.contains(":2:21: \"stdout\" is named twice"),
        "{twice}"
    );
    let not_toml = error("[audit\n");
    assert!(
        not_toml.starts_with("/etc/airlock/config.toml:1:"),
        "{not_toml}"
    );
}

#[test]
fn a_bad_endpoint_or_header_is_refused_at_its_line() {
    let with = |otlp: &str| {
        error(&format!(
            "[audit]\nexport = [\"otlp\"]\n[audit.otlp]\n{otlp}\n"
        ))
    };
    let ftp = with("endpoint = \"ftp://c/v1/logs\"");
    assert!(
        ftp.contains(":4:12: endpoint \"ftp://c/v1/logs\": not an http:// or https:// URL"),
        "{ftp}"
    );
    assert!(with("endpoint = \"http://user:pw@c/\"").contains("credentials in the URL"));
    assert!(with("endpoint = \"http://c:0/\"").contains("not a port number"));
    assert!(with("endpoint = \"http://c:99999/\"").contains("not a port number"));
    assert!(with("endpoint = \"http:///v1/logs\"").contains("no host"));
    assert!(with("endpoint = \"http://c d/\"").contains("spaces"));
    let env = with("endpoint = \"https://c\"\nheaders = { authorization = { env = \"UNSET\" } }");
    assert!(
        env.contains(":5:29: header \"authorization\": the environment variable UNSET is not set"),
        "{env}"
    );
    let clear = with("endpoint = \"http://collector:4318\"\nheaders = { authorization = \"x\" }");
    assert!(clear.contains("clear text"), "{clear}");
    assert!(with("endpoint = \"https://c\"\nheaders = { host = \"x\" }")
        .contains("airlock sets this header itself"));
    assert!(
        with("endpoint = \"https://c\"\nheaders = { a = { file = \"/nonexistent/x\" } }")
            .contains("cannot read /nonexistent/x")
    );
    assert!(
        with("endpoint = \"https://c\"\nheaders = { a = { vault = \"x\" } }").contains(":5:17:")
    );
    assert!(with("endpoint = \"http://c\"\nca_file = \"/ca.pem\"").contains("http://"));
    assert!(with("endpoint = \"https://c\"\nca_file = \"ca.pem\"").contains("absolute"));
}

#[test]
fn endpoints_take_the_default_path_and_ports() {
    let url = |text: &str| parse_endpoint(text).unwrap().to_string();
    assert_eq!(
        url("http://collector:4318"),
        "http://collector:4318/v1/logs"
    );
    assert_eq!(
        url("http://collector:4318/"),
        "http://collector:4318/v1/logs"
    );
    assert_eq!(url("https://collector"), "https://collector/v1/logs");
    assert_eq!(
        url("https://c/otlp/v1/logs?tenant=a"),
        "https://c/otlp/v1/logs?…"
    );
    assert_eq!(
        parse_endpoint("https://c/otlp/v1/logs?tenant=a")
            .unwrap()
            .path,
        "/otlp/v1/logs?tenant=a",
        "what is sent keeps its query"
    );
    let v6 = parse_endpoint("http://[::1]:4318/v1/logs").unwrap();
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 4318));
    assert_eq!(v6.authority(), "[::1]:4318");
    // Found by review: a key in the query was printed with every trouble line.
    let keyed = parse_endpoint("https://collector.example/v1/logs?api_key=SECRET").unwrap();
    assert_eq!(keyed.to_string(), "https://collector.example/v1/logs?…");
    assert!(parse_endpoint("http://[::1/").is_err());
    assert!(parse_endpoint("http://[zz]/").is_err());
    // A loopback collector may take headers over http://.
    let local = "[audit]\nexport = [\"otlp\"]\n[audit.otlp]\nendpoint = \"http://127.0.0.1:4318\"\nheaders = { a = \"b\" }\n";
    assert!(parse_text(local).is_ok());
}

#[test]
fn the_file_is_found_where_the_user_keeps_config() {
    let path = |explicit: Option<&str>, root: bool, xdg: Option<&str>, home: Option<&str>| {
        config_path(
            explicit.map(OsStr::new),
            root,
            xdg.map(OsStr::new),
            home.map(OsStr::new),
        )
    };
    assert_eq!(
        path(Some("/srv/a.toml"), true, None, None),
        Some(("/srv/a.toml".into(), true))
    );
    assert_eq!(
        path(None, true, Some("/x"), Some("/root")),
        Some(("/etc/airlock/config.toml".into(), false))
    );
    assert_eq!(
        path(None, false, Some("/x"), Some("/home/u")),
        Some(("/x/airlock/config.toml".into(), false))
    );
    assert_eq!(
        path(None, false, Some(""), Some("/home/u")),
        Some(("/home/u/.config/airlock/config.toml".into(), false))
    );
    assert_eq!(path(None, false, None, None), None);
}

#[test]
fn a_named_file_must_exist_a_default_one_need_not() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("config.toml");
    let error = load(Some(&missing)).unwrap_err().to_string();
    assert!(error.contains("--config"), "{error}");
    std::fs::write(&missing, "[audit]\nexport = [\"stdout\"]\n").unwrap();
    let (config, read) = load(Some(&missing)).unwrap();
    assert_eq!(config.audit.export, [Destination::Stdout]);
    assert_eq!(read.as_deref(), Some(missing.as_path()));
}
