//! Records as OCSF events (the Open Cybersecurity Schema Framework, 1.x), where a class fits: what
//! a SIEM needs to file a run as process activity, an egress decision as network activity and an
//! apply as file system activity without knowing airlock's actions. The record itself is not
//! rewritten (its hash covers it); the class goes beside it, as attributes of the exported log.
//! docs/audit.md has the table; the tests below hold it. A DNS query is DNS Activity (4003),
//! Query; refused, its status is failure.

use serde_json::{Map, Value};

/// Where a record fits in OCSF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OcsfClass {
    pub class_uid: u32,
    pub activity_id: u32,
    /// 1 Success, 2 Failure: a refusal or a denial is the failure of what was asked.
    pub status_id: u32,
}

impl OcsfClass {
    /// The class's category: 1 System Activity, 4 Network Activity.
    pub fn category_uid(&self) -> u32 {
        self.class_uid / 1000
    }

    /// OCSF's `type_uid`: the class and the activity in one number.
    pub fn type_uid(&self) -> u64 {
        u64::from(self.class_uid) * 100 + u64::from(self.activity_id)
    }
}

const PROCESS_ACTIVITY: u32 = 1007;
const FILE_SYSTEM_ACTIVITY: u32 = 1001;
const NETWORK_ACTIVITY: u32 = 4001;
/// DNS Activity, whose Query is activity 1.
const DNS_ACTIVITY: u32 = 4003;
const QUERY: u32 = 1;

// Activities, as OCSF numbers them in each class.
const LAUNCH: u32 = 1;
const TERMINATE: u32 = 2;
const UPDATE: u32 = 3;
const OPEN: u32 = 1;
const CLOSE: u32 = 2;
const RESET: u32 = 3;
const FAIL: u32 = 4;
const REFUSE: u32 = 5;
const TRAFFIC: u32 = 6;

const SUCCESS: u32 = 1;
const FAILURE: u32 = 2;

/// How much a record matters, in OTLP's and OCSF's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// What airlock did as asked.
    Info,
    /// A refusal, a denial, a run that lost its supervisor, a log that needed recovering.
    Warn,
}

impl Severity {
    /// OTLP's `SeverityNumber`: INFO 9, WARN 13.
    pub fn otlp_number(self) -> i32 {
        match self {
            Severity::Info => 9,
            Severity::Warn => 13,
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
        }
    }

    /// OCSF's `severity_id`: 1 Informational, 3 Medium.
    pub fn ocsf_id(self) -> u32 {
        match self {
            Severity::Info => 1,
            Severity::Warn => 3,
        }
    }
}

fn action(record: &Map<String, Value>) -> &str {
    record.get("action").and_then(Value::as_str).unwrap_or("")
}

/// A refusal (`*.refused`) or a denial (`denied: true`, a network attempt not `allowed`).
fn refused(record: &Map<String, Value>) -> bool {
    action(record).ends_with(".refused")
        || record.get("denied") == Some(&Value::Bool(true))
        || record.get("allowed") == Some(&Value::Bool(false))
}

/// The record's OCSF class and activity, if one fits.
pub fn classify(record: &Map<String, Value>) -> Option<OcsfClass> {
    let refused = refused(record);
    let (class_uid, activity_id) = match action(record) {
        "run.intent" | "run.learn" | "run.refused" => (PROCESS_ACTIVITY, LAUNCH),
        "run.result" | "run.abandoned" | "kill.intent" | "kill.result" | "kill.refused" => {
            (PROCESS_ACTIVITY, TERMINATE)
        }
        "apply.intent" | "apply.result" | "apply.recover" | "apply.recovered" | "apply.refused"
        | "revert.intent" | "revert.result" | "revert.refused" => (FILE_SYSTEM_ACTIVITY, UPDATE),
        "net.connect" | "net.fronting" if refused => (NETWORK_ACTIVITY, REFUSE),
        "net.connect" => (NETWORK_ACTIVITY, OPEN),
        "net.closed" => (NETWORK_ACTIVITY, CLOSE),
        "net.cut" => (NETWORK_ACTIVITY, RESET),
        "net.failed" => (NETWORK_ACTIVITY, FAIL),
        "net.dns" => (DNS_ACTIVITY, QUERY),
        "net.tls" | "net.tunnel" | "net.request" | "net.secret" | "net.placeholder" => {
            (NETWORK_ACTIVITY, if refused { REFUSE } else { TRAFFIC })
        }
        _ => return None,
    };
    Some(OcsfClass {
        class_uid,
        activity_id,
        status_id: if refused { FAILURE } else { SUCCESS },
    })
}

/// The record's severity: a warning for refusals, denials and what went wrong around a run.
pub fn severity(record: &Map<String, Value>) -> Severity {
    let troubled = matches!(
        action(record),
        "run.abandoned" | "log.recovered" | "apply.recover" | "apply.recovered"
    );
    if refused(record) || troubled {
        Severity::Warn
    } else {
        Severity::Info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn class_of(value: Value) -> Option<(u32, u32, u32)> {
        classify(&record(value)).map(|c| (c.class_uid, c.activity_id, c.status_id))
    }

    #[test]
    fn runs_are_process_activity() {
        assert_eq!(
            class_of(json!({"action": "run.intent"})),
            Some((1007, 1, 1))
        );
        assert_eq!(class_of(json!({"action": "run.learn"})), Some((1007, 1, 1)));
        assert_eq!(
            class_of(json!({"action": "run.refused"})),
            Some((1007, 1, 2))
        );
        assert_eq!(
            class_of(json!({"action": "run.result", "exit_code": 3})),
            Some((1007, 2, 1))
        );
        assert_eq!(
            class_of(json!({"action": "run.abandoned"})),
            Some((1007, 2, 1))
        );
        assert_eq!(
            class_of(json!({"action": "kill.result"})),
            Some((1007, 2, 1))
        );
    }

    #[test]
    fn egress_decisions_are_network_activity_and_dns_queries_dns_activity() {
        let connect = |allowed: bool| {
            class_of(json!({"action": "net.connect", "allowed": allowed, "denied": !allowed}))
        };
        assert_eq!(connect(true), Some((4001, 1, 1)));
        assert_eq!(connect(false), Some((4001, 5, 2)));
        assert_eq!(
            class_of(json!({"action": "net.fronting", "allowed": false})),
            Some((4001, 5, 2))
        );
        assert_eq!(
            class_of(json!({"action": "net.closed", "allowed": true})),
            Some((4001, 2, 1))
        );
        assert_eq!(
            class_of(json!({"action": "net.failed", "allowed": true})),
            Some((4001, 4, 1))
        );
        assert_eq!(
            class_of(json!({"action": "net.cut", "allowed": true})),
            Some((4001, 3, 1))
        );
        assert_eq!(
            class_of(json!({"action": "net.request", "allowed": true})),
            Some((4001, 6, 1))
        );
        assert_eq!(
            class_of(json!({"action": "net.request", "allowed": false})),
            Some((4001, 5, 2))
        );
        assert_eq!(
            class_of(json!({"action": "net.dns", "allowed": true})),
            Some((4003, 1, 1))
        );
        assert_eq!(
            class_of(json!({"action": "net.dns", "allowed": false})),
            Some((4003, 1, 2))
        );
    }

    #[test]
    fn applies_and_reverts_are_file_system_activity() {
        assert_eq!(
            class_of(json!({"action": "apply.intent"})),
            Some((1001, 3, 1))
        );
        assert_eq!(
            class_of(json!({"action": "apply.result"})),
            Some((1001, 3, 1))
        );
        assert_eq!(
            class_of(json!({"action": "revert.result"})),
            Some((1001, 3, 1))
        );
        assert_eq!(
            class_of(json!({"action": "apply.refused"})),
            Some((1001, 3, 2))
        );
    }

    #[test]
    fn the_rest_has_no_class() {
        for action in [
            "session.create",
            "session.discard",
            "approval.asked",
            "token.create",
            "disable",
            "log.recovered",
            "net.suppressed",
            "refusals.suppressed",
        ] {
            assert_eq!(class_of(json!({ "action": action })), None, "{action}");
        }
    }

    #[test]
    fn refusals_denials_and_trouble_are_warnings() {
        let of = |value: Value| severity(&record(value));
        assert_eq!(of(json!({"action": "run.intent"})), Severity::Info);
        assert_eq!(of(json!({"action": "session.refused"})), Severity::Warn);
        assert_eq!(
            of(json!({"action": "net.connect", "allowed": false})),
            Severity::Warn
        );
        assert_eq!(
            of(json!({"action": "net.suppressed", "denied": true})),
            Severity::Warn
        );
        assert_eq!(of(json!({"action": "run.abandoned"})), Severity::Warn);
        assert_eq!(of(json!({"action": "log.recovered"})), Severity::Warn);
        assert_eq!(
            (Severity::Warn.otlp_number(), Severity::Warn.ocsf_id()),
            (13, 3)
        );
        let class = classify(&record(json!({"action": "net.connect", "allowed": false}))).unwrap();
        assert_eq!((class.category_uid(), class.type_uid()), (4, 400105));
    }
}
