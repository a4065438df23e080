//! Records as OpenTelemetry logs: one `LogRecord` per audit record, in an
//! `ExportLogsServiceRequest` (the OTLP/HTTP body, protobuf), under one resource that says which
//! machine and which log they come from.
//!
//! Each log record carries the stored line, byte for byte, as its body (a string: the line is
//! JSON, so UTF-8), so that the chain can be verified from what a collector kept
//! (`airlock log verify --from`); and beside it, as attributes, what a query filters on:
//! `airlock.seq`, `airlock.hash`, `airlock.prev`, `airlock.action`, `airlock.session`,
//! `airlock.profile`, and the record's OCSF class (`ocsf.*`, see [`crate::ocsf`]). The record's
//! `time` is the log's time; the severity is INFO, or WARN for refusals and denials.

use std::path::Path;
use std::time::SystemTime;

use airlock_audit::Tailed;
use serde_json::Value;

use crate::ocsf;
use proto::collector::logs::v1::ExportLogsServiceRequest;
use proto::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use proto::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use proto::resource::v1::Resource;

/// The messages prost generated from proto/ (build.rs), nested as their packages are.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    pub mod common {
        pub mod v1 {
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.common.v1.rs"
            ));
        }
    }
    pub mod resource {
        pub mod v1 {
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.resource.v1.rs"
            ));
        }
    }
    pub mod logs {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.logs.v1.rs"));
        }
    }
    pub mod collector {
        pub mod logs {
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.collector.logs.v1.rs"
                ));
            }
        }
    }
}

/// The instrumentation scope's name: what made these logs.
pub const SCOPE: &str = "airlock.audit";

fn text(value: impl Into<String>) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(value.into())),
    })
}

fn int(value: u64) -> Option<AnyValue> {
    // OTLP's integers are signed; a seq past i64::MAX is not one a log reaches.
    Some(AnyValue {
        value: Some(any_value::Value::IntValue(
            i64::try_from(value).unwrap_or(i64::MAX),
        )),
    })
}

fn attribute(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value,
        ..KeyValue::default()
    }
}

/// Who sent the logs: airlock, on which host, from which log file; with what
/// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` add (as every OpenTelemetry SDK honours
/// them: in a pod, `k8s.pod.name` and the like, so that a fleet's chains stay apart).
pub fn resource(log_path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Resource {
    let mut pairs: Vec<(String, String)> = vec![
        ("service.name".into(), "airlock".into()),
        ("service.version".into(), env!("CARGO_PKG_VERSION").into()),
    ];
    if let Ok(host) = nix::unistd::gethostname() {
        pairs.push(("host.name".into(), host.to_string_lossy().into_owned()));
    }
    pairs.push(("airlock.audit_log".into(), log_path.display().to_string()));
    for (key, value) in env("OTEL_RESOURCE_ATTRIBUTES")
        .as_deref()
        .map(resource_attributes)
        .unwrap_or_default()
    {
        pairs.retain(|(k, _)| *k != key);
        pairs.push((key, value));
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.is_empty()) {
        pairs.retain(|(k, _)| k != "service.name");
        pairs.push(("service.name".into(), name));
    }
    Resource {
        attributes: pairs
            .into_iter()
            .map(|(key, value)| attribute(&key, text(value)))
            .collect(),
        ..Resource::default()
    }
}

/// `key1=value1,key2=value2`, values percent-encoded (the OpenTelemetry SDKs' format); a pair
/// without `=` is left out.
fn resource_attributes(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.trim().to_string(), percent_decoded(value.trim())))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Nanoseconds since the epoch of a record's `time` (RFC 3339); 0 (unknown, as OTLP says) when it
/// has none that reads.
fn time_nanos(record: &serde_json::Map<String, Value>) -> u64 {
    record
        .get("time")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .map_or(0, nanos_since_epoch)
}

fn nanos_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// One audit record as an OpenTelemetry log record.
pub fn log_record(tailed: &Tailed, observed: SystemTime) -> LogRecord {
    let record = &tailed.record;
    let action = record.get("action").and_then(Value::as_str).unwrap_or("");
    let severity = ocsf::severity(record);
    let mut attributes = vec![
        attribute("airlock.seq", int(tailed.seq)),
        attribute("airlock.hash", text(&tailed.hash)),
        attribute("airlock.prev", text(&tailed.prev)),
        attribute("airlock.action", text(action)),
    ];
    for key in ["session", "profile"] {
        if let Some(value) = record.get(key).and_then(Value::as_str) {
            attributes.push(attribute(&format!("airlock.{key}"), text(value)));
        }
    }
    attributes.push(attribute(
        "ocsf.severity_id",
        int(severity.ocsf_id().into()),
    ));
    if let Some(class) = ocsf::classify(record) {
        attributes.extend([
            attribute("ocsf.class_uid", int(class.class_uid.into())),
            attribute("ocsf.category_uid", int(class.category_uid().into())),
            attribute("ocsf.activity_id", int(class.activity_id.into())),
            attribute("ocsf.type_uid", int(class.type_uid())),
            attribute("ocsf.status_id", int(class.status_id.into())),
        ]);
    }
    LogRecord {
        time_unix_nano: time_nanos(record),
        observed_time_unix_nano: nanos_since_epoch(observed),
        severity_number: severity.otlp_number(),
        severity_text: severity.text().to_string(),
        body: text(String::from_utf8_lossy(&tailed.line)),
        attributes,
        event_name: format!("airlock.{action}"),
        ..LogRecord::default()
    }
}

/// The request that carries `batch`, in order.
pub fn request(resource: &Resource, batch: &[Tailed]) -> ExportLogsServiceRequest {
    let observed = SystemTime::now();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource.clone()),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: SCOPE.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..InstrumentationScope::default()
                }),
                log_records: batch.iter().map(|t| log_record(t, observed)).collect(),
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_audit::{AuditLog, Sync, Tail};
    use prost::Message;
    use serde_json::json;

    fn attributes(record: &LogRecord) -> Vec<(String, String)> {
        record
            .attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    Some(any_value::Value::IntValue(i)) => i.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), value)
            })
            .collect()
    }

    fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_batch_round_trips_with_each_line_and_its_chain_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path(), Sync::Never);
        log.append(
            "run.intent",
            json!({"session": "s1", "profile": "ci", "argv": ["make"]}),
        )
        .unwrap();
        log.append(
            "net.connect",
            json!({"allowed": false, "denied": true, "name": "evil.example"}),
        )
        .unwrap();
        log.append("session.create", json!({})).unwrap();
        let mut tail = Tail::after(&log.path(), None);
        let batch: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
        let resource = resource(&log.path(), &|_| None);

        let bytes = request(&resource, &batch).encode_to_vec();
        let decoded = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let scope = &decoded.resource_logs[0].scope_logs[0];
        assert_eq!(scope.scope.as_ref().unwrap().name, "airlock.audit");
        let records = &scope.log_records;
        assert_eq!(records.len(), 3);
        for (sent, tailed) in records.iter().zip(&batch) {
            let Some(any_value::Value::StringValue(body)) =
                sent.body.as_ref().and_then(|b| b.value.as_ref())
            else {
                panic!("no body");
            };
            assert_eq!(
                body.as_bytes(),
                tailed.line.as_slice(),
                "the stored line, exactly"
            );
            let pairs = attributes(sent);
            assert_eq!(
                get(&pairs, "airlock.seq"),
                Some(tailed.seq.to_string().as_str())
            );
            assert_eq!(get(&pairs, "airlock.hash"), Some(tailed.hash.as_str()));
            assert_eq!(get(&pairs, "airlock.prev"), Some(tailed.prev.as_str()));
            assert!(
                sent.time_unix_nano > 1_700_000_000_000_000_000,
                "the record's time"
            );
        }
        let run = attributes(&records[0]);
        assert_eq!(records[0].event_name, "airlock.run.intent");
        assert_eq!(records[0].severity_text, "INFO");
        assert_eq!(get(&run, "airlock.session"), Some("s1"));
        assert_eq!(get(&run, "airlock.profile"), Some("ci"));
        assert_eq!(get(&run, "ocsf.class_uid"), Some("1007"));
        assert_eq!(get(&run, "ocsf.type_uid"), Some("100701"));
        let denied = attributes(&records[1]);
        assert_eq!(
            (
                records[1].severity_number,
                records[1].severity_text.as_str()
            ),
            (13, "WARN")
        );
        assert_eq!(get(&denied, "ocsf.class_uid"), Some("4001"));
        assert_eq!(get(&denied, "ocsf.activity_id"), Some("5"));
        assert_eq!(get(&denied, "ocsf.status_id"), Some("2"));
        let session = attributes(&records[2]);
        assert_eq!(get(&session, "ocsf.class_uid"), None, "no class fits");
        assert_eq!(get(&session, "ocsf.severity_id"), Some("1"));
    }

    #[test]
    fn the_resource_names_the_machine_and_takes_the_sdks_variables() {
        let env = |name: &str| match name {
            "OTEL_RESOURCE_ATTRIBUTES" => {
                Some("k8s.pod.name=agent-7,team=a%2Cb,broken, host.name = pod-host".into())
            }
            "OTEL_SERVICE_NAME" => Some("airlock-pods".into()),
            _ => None,
        };
        let resource = resource(Path::new("/var/lib/airlock/audit.log"), &env);
        let pairs: Vec<(String, String)> = resource
            .attributes
            .iter()
            .map(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => (kv.key.clone(), s.clone()),
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        assert_eq!(get(&pairs, "service.name"), Some("airlock-pods"));
        assert_eq!(get(&pairs, "k8s.pod.name"), Some("agent-7"));
        assert_eq!(get(&pairs, "team"), Some("a,b"));
        assert_eq!(get(&pairs, "host.name"), Some("pod-host"));
        assert_eq!(
            get(&pairs, "airlock.audit_log"),
            Some("/var/lib/airlock/audit.log")
        );
        assert_eq!(pairs.iter().filter(|(k, _)| k == "host.name").count(), 1);
    }
}
