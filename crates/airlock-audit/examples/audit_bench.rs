//! Benchmarks for the audit log (used by bench/audit.sh):
//!
//! audit_bench appends DIR WRITERS PER_WRITER fsync|nofsync
//!     WRITERS threads, each with its own open file (so `flock` treats them as separate writers,
//!     as it does separate processes), append PER_WRITER records each; prints appends per second
//!     and checks that the chain is intact.
//! audit_bench generate DIR RECORDS
//!     writes a valid chained log of RECORDS run records over 1,000 sessions (one of them,
//!     `needle`, has 100 records), as fast as possible; for timing `airlock log` filters.
//! audit_bench history DIR RECORDS segments|single
//!     writes a log as a busy server keeps it (bench/audit-log.sh): a record a second from
//!     2026-01-01, 32 sessions at a time, each living for about 2,000 records (runs, their
//!     network attempts, a refusal now and then), three profiles, some records of API tokens.
//!     `segments`: rolled as airlock rolls it (a UTC day or 64 MiB), each segment sealed by
//!     the library itself; `single`: the same records in one audit.log, as before segments.
//!     Prints the session active in the middle of the log (the one `log --session` looks up).
//! audit_bench append DIR RECORDS fsync|nofsync
//!     appends RECORDS records to the log in DIR, one at a time as airlock does, and prints the
//!     mean microseconds per append.
// A benchmark driver: it stops at the first failure, saying what failed.
#![allow(clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use airlock_audit::{format_time, record_hash, AuditLog, Layout, Sync, GENESIS, LOG_FILE};
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

/// 2026-01-01T00:00:00Z: the first record of a generated history.
const HISTORY_START: u64 = 1_767_225_600;

/// One record of a busy server's history, `seq` of it, as `session` (of `profile`) wrote it.
fn history_record(seq: u64, prev: &str, session: &str, profile: &str) -> Map<String, Value> {
    let time = UNIX_EPOCH + Duration::from_secs(HISTORY_START + seq);
    let mut record = Map::new();
    record.insert("seq".into(), seq.into());
    record.insert("time".into(), format_time(time).into());
    record.insert("prev".into(), prev.into());
    let by = if seq.is_multiple_of(3) {
        json!({"uid": 0, "pid": 4000 + seq % 500, "token": format!("tok{}", seq % 7)})
    } else {
        json!({"uid": 0, "pid": 4000 + seq % 500})
    };
    match seq % 10 {
        0..=2 => {
            record.insert("action".into(), "run.intent".into());
            record.insert("session".into(), session.into());
            record.insert("profile".into(), profile.into());
            record.insert("argv".into(), json!(["make", "test", format!("T={seq}")]));
            record.insert("cwd".into(), "/srv/work".into());
            record.insert("run_id".into(), format!("{:016x}", seq * 7919).into());
        }
        3..=5 => {
            record.insert("action".into(), "run.result".into());
            record.insert("session".into(), session.into());
            record.insert("profile".into(), profile.into());
            record.insert("exit_code".into(), (seq % 3).into());
            record.insert("duration_ms".into(), (seq % 997).into());
            record.insert("cpu_ms".into(), (seq % 211).into());
        }
        6..=8 => {
            record.insert("action".into(), "net.connect".into());
            record.insert("session".into(), session.into());
            record.insert("profile".into(), profile.into());
            record.insert("name".into(), "registry.npmjs.org".into());
            record.insert("ip".into(), "104.16.0.35".into());
            record.insert("port".into(), 443.into());
            record.insert("allowed".into(), true.into());
            record.insert("rule".into(), "allow registry.npmjs.org".into());
        }
        _ => {
            record.insert("action".into(), "run.refused".into());
            record.insert("session".into(), session.into());
            record.insert("denied".into(), true.into());
            record.insert("error".into(), "the profile is disabled".into());
        }
    }
    record.insert("by".into(), by);
    let hash = record_hash(&record);
    record.insert("hash".into(), hash.into());
    record
}

/// The sessions of a history: 32 live at a time, each replaced after ~2,000 records. Returns the
/// session that writes record `seq`.
struct Sessions {
    live: Vec<(String, u64)>,
    made: u64,
    state: u64,
}

impl Sessions {
    fn new() -> Sessions {
        let mut sessions = Sessions {
            live: Vec::new(),
            made: 0,
            state: 0x9e37_79b9_7f4a_7c15,
        };
        for _ in 0..32 {
            let fresh = sessions.fresh();
            sessions.live.push(fresh);
        }
        sessions
    }

    /// xorshift: deterministic, so that every run builds the same log.
    fn random(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn fresh(&mut self) -> (String, u64) {
        self.made += 1;
        let life = 1_000 + self.random() % 2_000;
        (
            format!(
                "{:012x}",
                self.made.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 16
            ),
            life,
        )
    }

    fn next(&mut self) -> String {
        let at = (self.random() % self.live.len() as u64) as usize;
        let (session, left) = &mut self.live[at];
        let chosen = session.clone();
        *left -= 1;
        if *left == 0 {
            self.live[at] = self.fresh();
        }
        chosen
    }
}

fn history(dir: &Path, records: u64, segmented: bool) {
    std::fs::create_dir_all(dir).expect("dir");
    let log = AuditLog::new(dir, Sync::Never);
    let layout = Layout::default();
    let open = || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(LOG_FILE))
            .expect("log");
        std::io::BufWriter::with_capacity(1 << 20, file)
    };
    let mut out = open();
    let mut size = 0u64;
    let mut day = String::new();
    let mut prev = GENESIS.to_string();
    let mut sessions = Sessions::new();
    let mut needle = String::new();
    let profiles = ["ci-bot", "review-agent", "default"];
    let started = Instant::now();
    let (mut seals, mut sealing) = (0u32, Duration::ZERO);
    for seq in 1..=records {
        let session = sessions.next();
        if seq == records / 2 {
            needle.clone_from(&session);
        }
        let profile = profiles[(seq % 3) as usize];
        let record = history_record(seq, &prev, &session, profile);
        let time = record["time"].as_str().unwrap_or_default();
        if segmented
            && size > 0
            && (size >= layout.segment_size || time.get(..10) != Some(day.as_str()))
        {
            // As the appender would: the open segment is sealed before this record.
            out.flush().expect("flush");
            drop(out);
            let sealed_at = Instant::now();
            log.seal().expect("seal");
            sealing += sealed_at.elapsed();
            seals += 1;
            out = open();
            size = 0;
        }
        day = time.get(..10).unwrap_or_default().to_string();
        let mut line = serde_json::to_vec(&Value::Object(record.clone())).expect("json");
        line.push(b'\n');
        out.write_all(&line).expect("write");
        size += line.len() as u64;
        prev = record["hash"].as_str().unwrap_or_default().to_string();
    }
    out.flush().expect("flush");
    let head = format!("{{\"seq\":{records},\"hash\":\"{prev}\"}}\n");
    std::fs::write(dir.join("audit.head"), head).expect("head");
    eprintln!(
        "generated {records} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if seals > 0 {
        // What an append that rolls pays once per segment: reading it to index it, the renames.
        eprintln!(
            "sealed {seals} segments, {:.0} ms each on average",
            sealing.as_secs_f64() * 1e3 / f64::from(seals)
        );
    }
    println!("{needle}");
}

fn append_timing(dir: &Path, records: u64, sync: Sync) {
    let log = AuditLog::new(dir, sync);
    let started = Instant::now();
    for i in 0..records {
        log.append(
            "run.result",
            json!({"session": "bench-append", "profile": "ci-bot", "exit_code": 0, "i": i}),
        )
        .expect("append");
    }
    let per = started.elapsed().as_secs_f64() * 1e6 / records as f64;
    println!("{per:.1}");
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
        Some("history") if args.len() == 5 => history(
            Path::new(&args[2]),
            args[3].parse().expect("RECORDS"),
            args[4] == "segments",
        ),
        Some("append") if args.len() == 5 => append_timing(
            Path::new(&args[2]),
            args[3].parse().expect("RECORDS"),
            if args[4] == "fsync" {
                Sync::Always
            } else {
                Sync::Never
            },
        ),
        _ => {
            eprintln!("usage: audit_bench appends DIR WRITERS PER_WRITER fsync|nofsync");
            eprintln!("       audit_bench generate DIR RECORDS");
            eprintln!("       audit_bench history DIR RECORDS segments|single");
            eprintln!("       audit_bench append DIR RECORDS fsync|nofsync");
            std::process::exit(2);
        }
    }
}
