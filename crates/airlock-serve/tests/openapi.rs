//! The OpenAPI document the server answers GET /openapi.json with (crates/airlock-serve/openapi.json)
//! against the server's code: every route of the router is documented and nothing else is, and
//! every error code the server or core can answer is listed under its status, and no other.
//! Both are read from the source text, so that a route or a code added without its
//! documentation fails here. (scripts/test-schemathesis.sh checks the answers themselves.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

const METHODS: [&str; 7] = ["get", "post", "put", "delete", "patch", "head", "options"];

fn document() -> Value {
    serde_json::from_str(airlock_serve::OPENAPI)
        .unwrap_or_else(|e| panic!("openapi.json is not JSON: {e}"))
}

fn crate_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text inside the parentheses that open at `text[open]`, string literals skipped.
fn parenthesised(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    assert_eq!(bytes[open], b'(');
    let (mut depth, mut in_string, mut i) = (0usize, false, open);
    while i < bytes.len() {
        match (bytes[i], in_string) {
            (b'\\', true) => i += 1,
            (b'"', _) => in_string = !in_string,
            (b'(', false) => depth += 1,
            (b')', false) => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced parentheses after byte {open}");
}

/// The first string literal of `text` (no escapes in it: a route path has none).
fn first_string(text: &str) -> Option<(&str, &str)> {
    let start = text.find('"')? + 1;
    let len = text[start..].find('"')?;
    Some((&text[start..start + len], &text[start + len + 1..]))
}

/// The methods a `MethodRouter` expression names: `post(a).get(b)`, `get(sessions::get)` — a
/// method is a method name called at the start of the expression or after a `.` (a handler
/// named like one, `sessions::get`, follows `::` and is not called).
fn methods_of(expression: &str) -> Vec<String> {
    let compact: String = expression.split_whitespace().collect();
    let mut found = Vec::new();
    let mut depth = 0;
    let bytes = compact.as_bytes();
    for (i, c) in compact.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 && (i == 0 || bytes[i - 1] == b'.') => {
                let name: String = compact[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if METHODS.contains(&name.as_str()) && compact[i + name.len()..].starts_with('(') {
                    found.push(name);
                }
            }
            _ => {}
        }
    }
    found
}

/// (path, method) of every `.route("PATH", METHODS)` of routes/mod.rs.
fn routed() -> BTreeSet<(String, String)> {
    // The API's routes, and the page's own endpoints of the API (its HTML, script and style
    // are not the API's).
    let text = crate_file("src/routes/mod.rs") + &crate_file("src/page/mod.rs");
    let mut routes = BTreeSet::new();
    for (at, _) in text.match_indices(".route(") {
        let arguments = parenthesised(&text, at + ".route".len());
        let (path, rest) = first_string(arguments)
            .unwrap_or_else(|| panic!("a .route( without a path: {arguments}"));
        if !(path.starts_with("/v1/") || path == "/openapi.json") {
            continue;
        }
        let methods = methods_of(rest.trim_start_matches([',', ' ', '\n']));
        assert!(
            !methods.is_empty(),
            "route {path}: no method read in {rest:?} — teach this test the router's new form"
        );
        for method in methods {
            assert!(
                routes.insert((path.to_string(), method.clone())),
                "{method} {path} is routed twice"
            );
        }
    }
    assert!(
        routes.len() >= 20,
        "only {} routes read from routes/mod.rs: has the router's form changed?",
        routes.len()
    );
    routes
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("the document has paths");
    let mut operations = BTreeSet::new();
    for (path, item) in paths {
        let item = item.as_object().expect("a path item is an object");
        for method in item.keys().filter(|k| METHODS.contains(&k.as_str())) {
            operations.insert((path.clone(), method.clone()));
        }
    }
    operations
}

#[test]
fn the_document_is_openapi_3_1_and_every_operation_is_complete() {
    let doc = document();
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "openapi: {}",
        doc["openapi"]
    );
    assert!(doc["components"]["securitySchemes"]["bearerAuth"].is_object());
    let mut ids = BTreeSet::new();
    for (path, method) in documented(&doc) {
        let operation = &doc["paths"][&path][&method];
        let id = operation["operationId"].as_str();
        assert!(
            id.is_some_and(|id| ids.insert(id.to_string())),
            "{method} {path}: no operationId, or one used twice"
        );
        for field in ["summary", "description"] {
            assert!(
                operation[field].as_str().is_some_and(|s| !s.is_empty()),
                "{method} {path}: no {field}"
            );
        }
        let responses = operation["responses"].as_object().expect("responses");
        assert!(
            responses.keys().any(|status| status.starts_with('2')),
            "{method} {path}: no success response"
        );
        let open = operation["security"].as_array().is_some_and(Vec::is_empty);
        assert_eq!(
            open,
            !responses.contains_key("401"),
            "{method} {path}: an operation needs a token exactly when it documents 401"
        );
    }
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_routed() {
    let routes = routed();
    let doc = documented(&document());
    let undocumented: Vec<_> = routes.difference(&doc).collect();
    let unrouted: Vec<_> = doc.difference(&routes).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routed but not in openapi.json: {undocumented:?}\nin openapi.json but not routed: {unrouted:?}"
    );
}

#[test]
fn the_route_reader_reads_method_chains() {
    assert_eq!(
        methods_of("post(sessions::create).get(sessions::list)"),
        ["post", "get"]
    );
    assert_eq!(methods_of("get(sessions::get)"), ["get"]);
    assert_eq!(
        methods_of("\n    post(runs::in_session_streamed),\n"),
        ["post"]
    );
}

fn status_of_kind(kind: &str) -> &'static str {
    match kind.rsplit("::").next().unwrap_or(kind) {
        "Invalid" => "400",
        "Forbidden" => "403",
        "NotFound" => "404",
        "Conflict" => "409",
        "Unavailable" => "503",
        "Internal" => "500",
        "Unauthenticated" => "401",
        "Busy" => "429",
        "Cancelled" => "408",
        other => panic!("an ErrorKind this test does not know: {other}"),
    }
}

fn status_of_name(name: &str) -> &'static str {
    match name.rsplit("::").next().unwrap_or(name) {
        "BAD_REQUEST" => "400",
        "UNAUTHORIZED" => "401",
        "FORBIDDEN" => "403",
        "NOT_FOUND" => "404",
        "METHOD_NOT_ALLOWED" => "405",
        "REQUEST_TIMEOUT" => "408",
        "CONFLICT" => "409",
        "PAYLOAD_TOO_LARGE" => "413",
        "UNSUPPORTED_MEDIA_TYPE" => "415",
        "MISDIRECTED_REQUEST" => "421",
        "TOO_MANY_REQUESTS" => "429",
        "INTERNAL_SERVER_ERROR" => "500",
        "SERVICE_UNAVAILABLE" => "503",
        other => panic!("a status this test does not know: {other}"),
    }
}

/// A snake_case code at the start of `text`, closed by `"`.
fn code_at(text: &str) -> Option<&str> {
    let end = text.find('"')?;
    let code = &text[..end];
    let plain = !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    plain.then_some(code)
}

/// Every (code, status) the sources can answer: core's table (`("code", Kind)` in error.rs),
/// the token checks (tokens.rs), and the server's own errors (`ApiError::new(StatusCode::X,
/// "code"`, `ApiError::bad_request("code"`, `ApiError::internal(`).
fn codes_in_sources() -> BTreeMap<String, BTreeSet<String>> {
    let mut codes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |code: &str, status: &str| {
        codes
            .entry(code.to_string())
            .or_default()
            .insert(status.to_string());
    };
    let compact = |text: String| -> String { text.split_whitespace().collect() };
    let core = compact(crate_file("../airlock-core/src/error.rs"));
    for (at, _) in core.match_indices("(\"") {
        let rest = &core[at + 2..];
        let Some(code) = code_at(rest) else { continue };
        let after = &rest[code.len() + 1..];
        if let Some(kind) = after.strip_prefix(',') {
            let kind: String = kind
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == ':')
                .collect();
            if !kind.is_empty() && after[1 + kind.len()..].starts_with(')') {
                add(code, status_of_kind(&kind));
            }
        }
    }
    let tokens = compact(crate_file("../airlock-core/src/tokens.rs"));
    for (at, _) in tokens.match_indices("=>\"token_") {
        add(code_at(&tokens[at + 3..]).expect("a token code"), "401");
    }
    // The runs' own refusals (a worker that cannot start, a token that ended mid-run), which
    // the API says with the status of their kind.
    for file in sources_of("../airlock-runner/src") {
        let text = compact(std::fs::read_to_string(&file).expect("a source file"));
        for (at, _) in text.match_indices("Refusal::new(ErrorKind::") {
            let rest = &text[at + "Refusal::new(ErrorKind::".len()..];
            let kind: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let literal = rest[kind.len()..].strip_prefix(",\"").and_then(code_at);
            if let Some(code) = literal {
                add(code, status_of_kind(&kind));
            }
        }
        if text.contains("Refusal::internal(") {
            add("internal", "500");
        }
    }
    for file in serve_sources() {
        let text = compact(std::fs::read_to_string(&file).expect("a source file"));
        for (at, _) in text.match_indices("ApiError::bad_request(\"") {
            let rest = &text[at + "ApiError::bad_request(\"".len()..];
            add(code_at(rest).expect("a code"), "400");
        }
        for (at, _) in text.match_indices("ApiError::new(") {
            let rest = &text[at + "ApiError::new(".len()..];
            // Only a status named as a constant, then a literal code (not `status, code`).
            let status: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let literal = rest[status.len()..].strip_prefix(",\"").and_then(code_at);
            if let (true, Some(code)) = (status.contains("StatusCode::"), literal) {
                add(code, status_of_name(&status));
            }
        }
        if text.contains("ApiError::internal(") {
            add("internal", "500");
        }
    }
    codes
}

/// The server's sources but agent-sandbox's in-pod runtimes (routes/pod.rs, sandboxd/): their
/// routes are that project's contracts, not this API's, and their codes are documented with them
/// (docs/kubernetes.md).
fn serve_sources() -> Vec<PathBuf> {
    sources_of("src")
        .into_iter()
        .filter(|path| {
            !path.ends_with("routes/pod.rs")
                && !path.components().any(|c| c.as_os_str() == "sandboxd")
        })
        .collect()
}

/// The Rust files under `dir`, relative to this crate.
fn sources_of(dir: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// (code, status) as the document lists them: the enum of each `ErrorNNN` schema.
fn codes_in_document(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut codes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for (name, schema) in schemas {
        // Error400, Error401, …: not Error itself, nor ErrorEvent.
        let Some(status) = name
            .strip_prefix("Error")
            .filter(|s| s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let listed = schema["properties"]["code"]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} lists no codes"));
        for code in listed {
            let code = code.as_str().expect("a code is a string");
            codes
                .entry(code.to_string())
                .or_default()
                .insert(status.to_string());
        }
    }
    codes
}

#[test]
fn every_error_code_is_documented_under_its_status_and_no_other() {
    let sources = codes_in_sources();
    assert!(
        sources.len() > 40,
        "only {} codes read from the sources: has their form changed?",
        sources.len()
    );
    let documented = codes_in_document(&document());
    let mut wrong = Vec::new();
    for (code, statuses) in &sources {
        if documented.get(code) != Some(statuses) {
            wrong.push(format!(
                "{code}: answered with {statuses:?}, documented with {:?}",
                documented.get(code)
            ));
        }
    }
    for code in documented.keys().filter(|c| !sources.contains_key(*c)) {
        wrong.push(format!("{code}: documented, but nothing answers it"));
    }
    assert!(
        wrong.is_empty(),
        "openapi.json's error codes:\n{}",
        wrong.join("\n")
    );
}

/// The properties a schema documents, with those of the schemas its `allOf` names.
fn documented_properties(doc: &Value, name: &str) -> BTreeSet<String> {
    let schema = &doc["components"]["schemas"][name];
    let mut names: BTreeSet<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        if let Some(reference) = part["$ref"].as_str() {
            let inner = reference.rsplit('/').next().unwrap();
            names.extend(documented_properties(doc, inner));
        }
    }
    names
}

/// The fields a value of one of core's types has on the wire.
fn fields(value: &impl serde::Serialize) -> BTreeSet<String> {
    serde_json::to_value(value)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

fn a_run_result() -> airlock_core::RunResult {
    airlock_core::RunResult {
        end: airlock_core::RunEnd {
            exit_code: 152,
            limit: Some(airlock_core::Limit::Cpu),
            session: Some("k3v9x2".into()),
            kept: true,
            output_dropped: 1,
            oom_kills: 1,
            killed_by_switch: Some("why".into()),
            audit_error: Some("why".into()),
            cpu_limit_ms: Some(1000),
            refused: vec![airlock_core::RefusedDestination {
                host: "registry.npmjs.org".into(),
                port: Some(443),
                attempts: 3,
                rule: "network = \"none\"".into(),
                why: "profile 'default' allows no network".into(),
            }],
            refused_unlisted: 0,
        },
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 1,
    }
}

// The answers are core's types, serialized: what the document says of them must be what they
// are, field for field, or a field added to a type (or to the document) alone fails here.
#[test]
fn the_run_types_on_the_wire_are_the_documented_schemas() {
    use airlock_core::{Limit, RunAnswer, RunBody, RunEvent};
    let doc = document();
    let result = a_run_result();
    assert_eq!(fields(&result), documented_properties(&doc, "RunResult"));
    assert_eq!(
        fields(&result.end.refused[0]),
        documented_properties(&doc, "RefusedDestination")
    );
    let answer = RunAnswer {
        result: result.clone(),
        stdout: String::new(),
        stderr: String::new(),
    };
    assert_eq!(fields(&answer), documented_properties(&doc, "RunAnswer"));
    assert_eq!(
        fields(&RunEvent::Result(result)),
        documented_properties(&doc, "ResultEvent")
    );
    assert_eq!(
        fields(&RunEvent::Stdout { data: "x".into() }),
        documented_properties(&doc, "OutputEvent")
    );
    assert_eq!(
        fields(&RunEvent::Error {
            code: "c".into(),
            message: "m".into()
        }),
        documented_properties(&doc, "ErrorEvent")
    );
    // What a request may say is what core reads, no more and no less.
    assert_eq!(
        fields(&RunBody::default()),
        documented_properties(&doc, "RunBody")
    );
    assert_eq!(
        fields(&RunBody::default()),
        documented_properties(&doc, "SessionRunBody")
    );
    // Every limit core names is documented (Other is only read, from a newer server).
    let documented: BTreeSet<String> = doc["components"]["schemas"]["Limit"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let named: BTreeSet<String> = [
        Limit::Timeout,
        Limit::Cpu,
        Limit::Disk,
        Limit::Memory,
        Limit::KillSwitch,
    ]
    .iter()
    .map(|l| l.as_str().to_string())
    .collect();
    assert_eq!(named, documented);
}

// The bodies the API takes are core's types: each documented schema has exactly their fields.
#[test]
fn the_request_bodies_are_the_documented_schemas() {
    use airlock_core::bodies::{
        ApplyBody, ControlBody, LoginBody, NewSessionBody, NoFields, SwitchBody,
    };
    let doc = document();
    let pairs = [
        (fields(&NewSessionBody::default()), "NewSession"),
        (fields(&ApplyBody::default()), "Apply"),
        (fields(&ControlBody::default()), "Why"),
        (fields(&ControlBody::default()), "PauseOrResume"),
        (fields(&SwitchBody::default()), "Switch"),
        (fields(&NoFields::default()), "NoFields"),
        (fields(&LoginBody::default()), "LoginRequest"),
    ];
    for (fields, schema) in pairs {
        assert_eq!(fields, documented_properties(&doc, schema), "{schema}");
    }
}

// The approvals' answers and the body that decides one are core's types, field for field.
#[test]
fn the_approval_types_are_the_documented_schemas() {
    use airlock_core::{
        Approval, ApprovalAnswer, ApprovalDecision, ApprovalList, ApprovalStatus, DecideRequest,
    };
    let doc = document();
    let answer = ApprovalAnswer {
        status: ApprovalStatus::Denied,
        by: "uid 1000".into(),
        reason: Some("not now".into()),
        at: 1,
    };
    let approval = Approval {
        id: "ap_0123456789abcdef".into(),
        status: ApprovalStatus::Denied,
        session: Some("k3v9x2".into()),
        profile: "ci".into(),
        run: 42,
        host: "api.github.com".into(),
        port: 443,
        program: Some("curl".into()),
        entry: "*.github.com".into(),
        asked_at: 1,
        expires_at: 61,
        timeout_seconds: 60,
        seconds_left: 0,
        profile_line: "allow = [\"api.github.com:443\"]".into(),
        answer: Some(answer.clone()),
    };
    assert_eq!(fields(&approval), documented_properties(&doc, "Approval"));
    assert_eq!(
        fields(&answer),
        documented_properties(&doc, "ApprovalAnswer")
    );
    let list = ApprovalList {
        approvals: vec![approval],
    };
    assert_eq!(fields(&list), documented_properties(&doc, "ApprovalList"));
    let decide = DecideRequest {
        decision: ApprovalDecision::AllowSession,
        reason: Some("why".into()),
    };
    assert_eq!(fields(&decide), documented_properties(&doc, "Decide"));
    // The words of the enums, as documented.
    let words = |name: &str, path: &[&str]| -> BTreeSet<String> {
        let mut schema = &doc["components"]["schemas"][name];
        for step in path {
            schema = &schema[*step];
        }
        schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let statuses: BTreeSet<String> = [
        ApprovalStatus::Pending,
        ApprovalStatus::AllowedOnce,
        ApprovalStatus::AllowedSession,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Ended,
    ]
    .iter()
    .map(|s| {
        serde_json::to_value(s)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    assert_eq!(statuses, words("ApprovalStatus", &[]));
    let decisions: BTreeSet<String> = [
        ApprovalDecision::AllowOnce,
        ApprovalDecision::AllowSession,
        ApprovalDecision::Deny,
    ]
    .iter()
    .map(|s| {
        serde_json::to_value(s)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    assert_eq!(decisions, words("Decide", &["properties", "decision"]));
}
