//! Benchmarks for the audit log (used by bench/audit.sh):
//!
//! audit_bench appends DIR WRITERS PER_WRITER fsync|nofsync
//!     WRITERS threads, each with its own open file (so `flock` treats them as separate writers,
//!     as it does separate processes), append PER_WRITER records each; prints appends per second
//!     and checks that the chain is intact.
//! audit_bench generate DIR RECORDS
//!     writes a valid chained log of RECORDS run records over 1,000 sessions (one of them,
//!     `needle`, has 100 records), as fast as possible; for timing `airlock log` filters.
// A benchmark driver: it stops at the first failure, saying what failed.
#![allow(clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use airlock_audit::{record_hash, AuditLog, Sync, GENESIS, LOG_FILE};
use serde_json::{json, Map, Value};

fn appends(dir: &Path, writers: usize, per_writer: usize, sync: Sync) {
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let log = AuditLog::new(dir, sync);
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    log.append(
                        "bench.append",
                        json!({"writer": w, "i": i, "session": "bench"}),
                    )
                    .expect("append");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("writer");
    }
    let seconds = started.elapsed().as_secs_f64();
    let total = writers * per_writer;
    println!("{:.0}", total as f64 / seconds);
    let verdict = AuditLog::new(dir, sync).verify().expect("verify");
    assert!(verdict.problem.is_none(), "{:?}", verdict.problem);
}

fn generate(dir: &Path, records: u64) {
    std::fs::create_dir_all(dir).expect("dir");
    let file = std::fs::File::create(dir.join(LOG_FILE)).expect("log");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut prev = GENESIS.to_string();
    for seq in 1..=records {
        let session = if seq % 10_000 == 0 {
            "needle".to_string()
        } else {
            format!("{:012x}", seq % 1000)
        };
        let mut record = Map::new();
        record.insert("seq".into(), seq.into());
        record.insert("time".into(), "2026-11-29T20:00:00.000Z".into());
        record.insert("prev".into(), prev.clone().into());
        record.insert("action".into(), "run.result".into());
        record.insert("session".into(), session.into());
        record.insert("profile".into(), "default".into());
        record.insert("exit_code".into(), 0.into());
        record.insert("duration_ms".into(), (seq % 97).into());
        record.insert("cpu_ms".into(), 3.into());
        let hash = record_hash(&record);
        record.insert("hash".into(), hash.clone().into());
        serde_json::to_writer(&mut out, &Value::Object(record)).expect("write");
        out.write_all(b"\n").expect("write");
        prev = hash;
    }
    out.flush().expect("flush");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("appends") if args.len() == 6 => appends(
            Path::new(&args[2]),
            args[3].parse().expect("WRITERS"),
            args[4].parse().expect("PER_WRITER"),
            if args[5] == "fsync" {
                Sync::Always
            } else {
                Sync::Never
            },
        ),
        Some("generate") if args.len() == 4 => {
            generate(Path::new(&args[2]), args[3].parse().expect("RECORDS"))
        }
        _ => {
            eprintln!("usage: audit_bench appends DIR WRITERS PER_WRITER fsync|nofsync");
            eprintln!("       audit_bench generate DIR RECORDS");
            std::process::exit(2);
        }
    }
}
