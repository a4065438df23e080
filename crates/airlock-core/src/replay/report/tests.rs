use super::*;
use airlock_rules::Destination;
use serde_json::json;

fn draft(allow: &[&str]) -> NetworkMode {
    NetworkMode::Allow {
        allow: allow
            .iter()
            .map(|t| Destination::parse(t).unwrap())
            .collect(),
        deny: vec![],
    }
}

fn intent(seq: u64, pid: u64, session: Option<&str>, argv: &[&str], time: &str) -> Value {
    json!({"seq": seq, "time": time, "action": "run.intent", "session": session,
        "profile": "ci", "argv": argv, "by": {"uid": 1000, "pid": pid}})
}

fn net(pid: u64, action: &str, fields: Value, time: &str) -> Value {
    let mut record = fields;
    let map = record.as_object_mut().unwrap();
    map.insert("action".into(), action.into());
    map.insert("time".into(), time.into());
    map.insert("profile".into(), "ci".into());
    map.insert("session".into(), Value::Null);
    map.insert("by".into(), json!({"uid": 1000, "pid": pid}));
    record
}

/// Two runs of `ci`: one fetched from pypi.org and files.pythonhosted.org (resolved first), the
/// other was refused github.com at DNS and connected to a bare address.
fn two_runs() -> Vec<Value> {
    let t1 = "2026-12-01T10:00:00.000Z";
    let t2 = "2026-12-02T10:00:00.000Z";
    vec![
        intent(1, 100, None, &["pip", "download", "six"], t1),
        net(
            100,
            "net.dns",
            json!({"name": "pypi.org", "allowed": true, "rule": "allow pypi.org"}),
            t1,
        ),
        net(
            100,
            "net.connect",
            json!({"name": "pypi.org", "ip": "151.101.0.223", "port": 443, "allowed": true, "rule": "allow pypi.org"}),
            t1,
        ),
        net(
            100,
            "net.connect",
            json!({"name": "pypi.org", "ip": "151.101.0.223", "port": 443, "allowed": true, "rule": "allow pypi.org"}),
            t1,
        ),
        net(
            100,
            "net.closed",
            json!({"name": "pypi.org", "ip": "151.101.0.223", "port": 443, "allowed": true, "rule": "allow pypi.org", "bytes_out": 10}),
            t1,
        ),
        net(
            100,
            "net.dns",
            json!({"name": "files.pythonhosted.org", "allowed": true, "rule": "allow files.pythonhosted.org"}),
            t1,
        ),
        net(
            100,
            "net.connect",
            json!({"name": "files.pythonhosted.org", "ip": "151.101.64.223", "port": 443, "allowed": true, "rule": "allow files.pythonhosted.org"}),
            t1,
        ),
        intent(9, 200, None, &["git", "clone"], t2),
        net(
            200,
            "net.dns",
            json!({"name": "github.com", "allowed": false, "rule": "no allow entry names it"}),
            t2,
        ),
        net(
            200,
            "net.connect",
            json!({"ip": "10.0.0.5", "port": 5432, "allowed": true, "rule": "allow 10.0.0.5:5432"}),
            t2,
        ),
    ]
}

fn replay(records: &[Value], draft: &NetworkMode, since: Option<&str>) -> Replay {
    let mut replaying = Replaying::new(draft, since.map(str::to_string));
    for record in records {
        replaying.add(record.as_object().unwrap());
    }
    replaying.finish("ci", "ci")
}

#[test]
fn the_same_rules_break_nothing_and_leave_nothing_unused() {
    let same = draft(&["pypi.org", "files.pythonhosted.org", "10.0.0.5:5432"]);
    let replayed = replay(&two_runs(), &same, None);
    assert!(!replayed.breaks(), "{replayed:#?}");
    assert_eq!((replayed.runs, replayed.attempts), (2, 7));
    assert!(replayed.never_used.is_empty(), "{:?}", replayed.never_used);
    assert!(replayed.would_now_allow.is_empty());
}

#[test]
fn a_narrowed_draft_names_what_it_would_refuse_and_the_runs_that_needed_it() {
    let narrowed = draft(&["pypi.org", "10.0.0.5:5432"]);
    let replayed = replay(&two_runs(), &narrowed, None);
    assert!(replayed.breaks());
    assert_eq!(
        replayed.would_refuse.len(),
        1,
        "the DNS query is told by its connection"
    );
    let lost = &replayed.would_refuse[0];
    assert_eq!(lost.target(), "files.pythonhosted.org:443");
    assert_eq!((lost.stage, lost.attempts), ("connect", 1));
    assert_eq!(lost.then, "allow files.pythonhosted.org");
    assert_eq!(lost.now, "no allow entry names it");
    assert_eq!(lost.runs.len(), 1);
    assert_eq!(lost.runs[0].intent_seq, Some(1));
    assert_eq!(lost.runs[0].argv, ["pip", "download", "six"]);
    assert_eq!(replayed.runs_broken.len(), 1);
    assert_eq!(
        replayed.runs_broken[0].destinations,
        ["files.pythonhosted.org:443"]
    );
}

#[test]
fn a_port_narrowed_away_is_refused_by_port() {
    let replayed = replay(
        &two_runs(),
        &draft(&["pypi.org:80", "files.pythonhosted.org", "10.0.0.5:5432"]),
        None,
    );
    let lost = &replayed.would_refuse[0];
    assert_eq!((lost.target(), lost.attempts), ("pypi.org:443".into(), 2));
    assert_eq!(lost.now, "port 443 is not allowed");
}

#[test]
fn a_widened_draft_lists_its_unused_entries_and_what_it_would_now_allow() {
    let widened = draft(&[
        "pypi.org",
        "files.pythonhosted.org",
        "10.0.0.5:5432",
        "github.com",
        "registry.npmjs.org",
    ]);
    let replayed = replay(&two_runs(), &widened, None);
    assert!(!replayed.breaks());
    assert_eq!(replayed.never_used, ["registry.npmjs.org"]);
    assert_eq!(replayed.would_now_allow.len(), 1);
    let opened = &replayed.would_now_allow[0];
    assert_eq!((opened.host.as_str(), opened.port), ("github.com", None));
    assert_eq!(opened.stage, "dns");
    assert!(
        opened
            .note
            .as_deref()
            .unwrap()
            .contains("port it was for is unknown"),
        "{opened:?}"
    );
    assert_eq!(opened.runs[0].argv, ["git", "clone"]);
}

#[test]
fn since_keeps_later_attempts_with_the_runs_they_belong_to() {
    let narrowed = draft(&["pypi.org"]);
    let replayed = replay(&two_runs(), &narrowed, Some("2026-12-02T00:00:00.000Z"));
    assert_eq!(replayed.runs, 1);
    assert_eq!(replayed.would_refuse.len(), 1);
    assert_eq!(replayed.would_refuse[0].target(), "10.0.0.5:5432");
    assert_eq!(replayed.would_refuse[0].runs[0].argv, ["git", "clone"]);
}

#[test]
fn counted_events_are_replayed_by_their_samples_and_the_rest_is_said() {
    let t = "2026-12-01T10:00:00.000Z";
    let records = vec![
        intent(1, 100, Some("s1"), &["npm", "ci"], t),
        json!({"seq": 2, "time": t, "action": "net.suppressed", "session": "s1", "profile": "ci",
            "by": {"uid": 1000, "pid": 100}, "suppressed": 30, "denied_count": 0,
            "top": [{"kind": "connect", "name": "registry.npmjs.org", "ip": "104.16.0.35",
                "port": 443, "protocol": "tcp", "allowed": true,
                "rule": "allow registry.npmjs.org", "count": 25}]}),
    ];
    let replayed = replay(&records, &draft(&["pypi.org"]), None);
    assert_eq!(replayed.would_refuse[0].attempts, 25);
    assert_eq!(
        replayed.would_refuse[0].runs[0].session.as_deref(),
        Some("s1")
    );
    assert_eq!(replayed.not_replayed, 5);
}

#[test]
fn an_attempt_without_its_intent_is_a_run_known_by_its_time() {
    let records = &two_runs()[1..3];
    let replayed = replay(records, &draft(&[]), None);
    let run = &replayed.runs_broken[0].run;
    assert_eq!(run.intent_seq, None);
    assert_eq!(run.time.as_deref(), Some("2026-12-01T10:00:00.000Z"));
}

#[test]
fn a_learning_runs_attempts_are_not_the_profiles_runs() {
    let same = draft(&["pypi.org", "files.pythonhosted.org", "10.0.0.5:5432"]);
    let t3 = "2026-12-03T10:00:00.000Z";
    let mut records = two_runs();
    let mut learning = intent(20, 300, Some("k3v9x2"), &["npm", "install"], t3);
    learning["action"] = "run.learn".into();
    records.push(learning);
    let mut reached = net(
        300,
        "net.connect",
        json!({"name": "registry.npmjs.org", "ip": "104.16.0.1", "port": 443, "allowed": true, "rule": "network = \"open\""}),
        t3,
    );
    reached["session"] = "k3v9x2".into();
    records.push(reached);
    let replayed = replay(&records, &same, None);
    // Its network was open: what it reached is no run of the profile's to break.
    assert!(!replayed.breaks(), "{replayed:#?}");
    assert_eq!((replayed.runs, replayed.attempts), (2, 7));
}
