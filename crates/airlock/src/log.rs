//! `airlock log` and `airlock log verify`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

use airlock_audit::Filter;

use crate::cli::{GlobalArgs, LogArgs, LogCommand};
use crate::run::state_dir;
use crate::shown::{counted, note};

/// Exit status when the chain is broken.
const EXIT_BROKEN: u8 = 2;

/// `airlock log verify --from FILE`: the chain of an exported stream.
fn verify_exported(file: &Path, json: bool) -> Result<ExitCode> {
    let verdict = if file == Path::new("-") {
        airlock_audit::verify_exported(std::io::stdin().lock(), Path::new("stdin"))?
    } else {
        let opened =
            std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
        airlock_audit::verify_exported(std::io::BufReader::new(opened), file)?
    };
    let empty = verdict.records == 0 && verdict.problem.is_none();
    let problem = verdict
        .problem
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| {
            empty.then(|| {
                "it holds no audit record (JSON lines with seq, prev and hash)".to_string()
            })
        });
    let (last_seq, head) = match &verdict.last {
        Some((seq, hash)) => (Some(*seq), Some(hash.as_str())),
        None => (None, None),
    };
    if json {
        crate::shown::out!(
            "{}",
            serde_json::json!({
                "intact": problem.is_none(),
                "records": verdict.records,
                "first": verdict.first,
                "last": last_seq,
                "duplicates": verdict.duplicates,
                "skipped_lines": verdict.skipped,
                "problem": problem,
                "problem_at": verdict.problem,
                "head": head.filter(|_| problem.is_none()),
            })
        );
    } else if let Some(problem) = &problem {
        note!(
            "airlock: {}: BROKEN after {}: {problem}",
            file.display(),
            counted(verdict.records, "intact record", "intact records")
        );
    } else {
        let mut also = Vec::new();
        if verdict.duplicates > 0 {
            also.push(format!(
                "{} sent twice",
                counted(verdict.duplicates, "record", "records")
            ));
        }
        if verdict.skipped > 0 {
            also.push(format!(
                "{} skipped",
                counted(verdict.skipped, "other line", "other lines")
            ));
        }
        let also = if also.is_empty() {
            String::new()
        } else {
            format!(" ({})", also.join(", "))
        };
        crate::shown::out!(
            "{}: intact, records {} to {}{also}; last hash {}",
            file.display(),
            verdict.first.unwrap_or(0),
            last_seq.unwrap_or(0),
            head.unwrap_or("-")
        );
        if verdict.first.is_some_and(|first| first > 1) {
            note!(
                "airlock: the stream starts at record {}: the records before it are not in {}, so its first record's prev is taken on trust",
                verdict.first.unwrap_or(0),
                file.display()
            );
        }
    }
    Ok(if problem.is_some() {
        ExitCode::from(EXIT_BROKEN)
    } else {
        ExitCode::SUCCESS
    })
}

/// Exit status when a destination could not take every record.
const EXIT_LAGGING: u8 = 1;

/// `airlock log export [--follow]`: the same exporters `airlock serve` runs, in this process.
fn export(global: &GlobalArgs, follow: bool, config: Option<&Path>) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let (config, read) = airlock_core::config::load(config)?;
    if config.audit.export.is_empty() {
        let place = match (read, airlock_core::config::location(None)) {
            (Some(read), _) => format!("{} names no destination", read.display()),
            (None, Some((default, _))) => format!("there is no config at {}", default.display()),
            (None, None) => "there is no config (neither HOME nor XDG_CONFIG_HOME is set)".into(),
        };
        bail!("nothing to export to: {place} — add [audit] with export = [\"stdout\"] or [\"otlp\"] and [audit.otlp] endpoint = \"…\" (see docs/audit.md), or pass --config FILE");
    }
    if follow {
        let exporters = airlock_export::start(&state, &config.audit)?;
        note!(
            "airlock: exporting {} to {} as records are written; stop with Ctrl-C (the cursors in {} keep the place)",
            state.join(airlock_audit::LOG_FILE).display(),
            exporters.destinations().join(" and "),
            state.join(airlock_export::EXPORT_DIR).display()
        );
        exporters.wait();
        return Ok(ExitCode::SUCCESS);
    }
    let mut lagging = false;
    for (destination, ended) in airlock_export::export_now(&state, &config.audit)? {
        match ended {
            airlock_export::Ended::CaughtUp { sent } => note!(
                "airlock: export to {destination}: {} sent; it has every record",
                counted(sent, "record", "records")
            ),
            airlock_export::Ended::Lagging { sent, why } => {
                lagging = true;
                note!(
                    "airlock: export to {destination}: {} sent, then it failed ({why}); the next export continues from there",
                    counted(sent, "record", "records")
                );
            }
        }
    }
    Ok(if lagging {
        ExitCode::from(EXIT_LAGGING)
    } else {
        ExitCode::SUCCESS
    })
}

/// `airlock log prune`: one retention pass, as the config says.
fn prune(global: &GlobalArgs, config: Option<&Path>) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let (config, read) = airlock_core::config::load(config)?;
    if config.audit.retention.is_unlimited() {
        let place = match (read, airlock_core::config::location(None)) {
            (Some(read), _) => format!("{} sets no retention", read.display()),
            (None, Some((default, _))) => format!("there is no config at {}", default.display()),
            (None, None) => "there is no config (neither HOME nor XDG_CONFIG_HOME is set)".into(),
        };
        bail!("nothing to prune by: {place} — add keep_days = N and/or keep_size = \"20GiB\" under [audit] (see docs/audit.md), or pass --config FILE");
    }
    let (report, said) = airlock_export::retention_pass(&state, &config.audit)?;
    for line in &said {
        note!("airlock: {line}");
    }
    if report.removed.is_empty() && report.held.is_empty() {
        note!("airlock: audit retention: no sealed segment is past keep_days/keep_size");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn since(text: &str) -> Result<String> {
    let at = if let Ok(ago) = airlock_core::units::parse_duration(text) {
        SystemTime::now()
            .checked_sub(std::time::Duration::from_secs(ago))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    } else {
        humantime::parse_rfc3339_weak(text).with_context(|| {
            format!(
                "--since {text:?}: give a duration (10m, 2h, 7d) or a time (2026-11-29T20:00:00Z)"
            )
        })?
    };
    Ok(humantime::format_rfc3339_millis(at).to_string())
}

fn field<'a>(record: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    record.get(key).filter(|v| !v.is_null())
}

/// A count the record holds, with its noun; as it is written when it is not a number.
fn counted_field(record: &Map<String, Value>, key: &str, one: &str, many: &str) -> String {
    match field(record, key).and_then(Value::as_u64) {
        Some(n) => counted(n, one, many),
        None => format!("{} {many}", text(record, key)),
    }
}

fn text(record: &Map<String, Value>, key: &str) -> String {
    match field(record, key) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// One line a person reads: what the record says, shortly.
fn summary(record: &Map<String, Value>) -> String {
    let action = text(record, "action");
    let profile = text(record, "profile");
    match action.as_str() {
        "run.intent" => {
            let argv: Vec<String> = field(record, "argv")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "{} (profile {profile}, in {})",
                crate::shown::command_line(&argv),
                text(record, "cwd")
            )
        }
        "run.result" => {
            let duration = text(record, "duration_ms");
            if let Some(error) = field(record, "error") {
                format!("failed: {}", error.as_str().unwrap_or_default())
            } else if text(record, "limit") == "timeout" {
                format!("time limit reached after {duration} ms; killed")
            } else if text(record, "limit") == "cpu" {
                format!("CPU time limit reached after {duration} ms; killed")
            } else {
                format!(
                    "exit {} after {duration} ms, {} ms CPU",
                    text(record, "exit_code"),
                    text(record, "cpu_ms")
                )
            }
        }
        "apply.result" | "revert.result" | "apply.recovered" => {
            let paths = field(record, "paths").and_then(Value::as_array);
            let done = paths.map_or(0, |p| p.iter().filter(|x| x["done"] == true).count());
            let skipped = field(record, "skipped")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!(
                "apply {}: {} written, {skipped} left out",
                text(record, "number"),
                counted(done as u64, "path", "paths")
            )
        }
        "session.create" => format!(
            "workspace {} (profile {profile})",
            text(record, "workspace")
        ),
        "net.suppressed" => format!(
            "{} counted, not written one by one ({} refused)",
            counted_field(record, "suppressed", "event", "events"),
            text(record, "denied_count")
        ),
        _ if action.starts_with("net.") => {
            let (name, ip, port) = (
                text(record, "name"),
                text(record, "ip"),
                text(record, "port"),
            );
            let what = match (name.is_empty(), ip.is_empty(), port.is_empty()) {
                (false, false, _) => format!("{name}:{port} ({ip})"),
                (false, true, false) => format!("{name}:{port}"),
                (false, true, true) => name,
                _ => format!("{ip}:{port}"),
            };
            if action == "net.failed" {
                format!("{what}: {}", text(record, "rule"))
            } else if action == "net.closed" {
                format!(
                    "{what}: closed after {} ms, {} out, {} in",
                    text(record, "duration_ms"),
                    counted_field(record, "bytes_out", "byte", "bytes"),
                    text(record, "bytes_in")
                )
            } else {
                let verdict = if field(record, "allowed") == Some(&Value::Bool(true)) {
                    "allowed"
                } else {
                    "REFUSED"
                };
                format!("{what}: {verdict} ({})", text(record, "rule"))
            }
        }
        _ if action.ends_with(".refused") => format!("REFUSED: {}", text(record, "error")),
        "log.recovered" => text(record, "summary"),
        _ => {
            let mut rest: Vec<String> = record
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "seq" | "time" | "prev" | "hash" | "action" | "session" | "by"
                    )
                })
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        match v {
                            Value::String(s) => s.clone(),
                            v => v.to_string(),
                        }
                    )
                })
                .collect();
            rest.truncate(6);
            rest.join(" ")
        }
    }
}

fn print(out: &mut impl Write, record: &Map<String, Value>, json: bool) -> std::io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, record)?;
        return writeln!(out);
    }
    let time = text(record, "time");
    let session = text(record, "session");
    writeln!(
        out,
        "{:<23}  {:<12}  {:<16}  {}",
        time.get(..23).unwrap_or(&time).replace('T', " "),
        if session.is_empty() {
            "-".to_string()
        } else {
            crate::shown::printable(&session)
        },
        crate::shown::printable(&text(record, "action")),
        // Whatever the record holds from the sandbox's side cannot make a line of its own.
        crate::shown::printable(&summary(record))
    )
}

/// `airlock log verify`: the chain of this machine's log, over every segment.
fn verify(log: &airlock_audit::AuditLog, json: bool) -> Result<ExitCode> {
    let verdict = log.verify()?;
    let place = match verdict.segments {
        0 => log.path().display().to_string(),
        n => format!(
            "{} and {} in {}",
            log.path().display(),
            counted(n, "sealed segment", "sealed segments"),
            log.state_dir().join(airlock_audit::SEGMENT_DIR).display()
        ),
    };
    let retention = verdict.retention.as_ref().map(|r| {
        format!(
            "records 1 to {} removed by retention at {} (record {})",
            r.through, r.time, r.record
        )
    });
    if json {
        crate::shown::out!(
            "{}",
            serde_json::json!({
                "intact": verdict.problem.is_none(),
                "records": verdict.records,
                "first": verdict.first,
                "segments": verdict.segments,
                "problem": verdict.problem.as_ref().map(|p| p.to_string()),
                // The same, for scripts: {"kind": "altered", "line": 3, "seq": 3}…
                "problem_at": verdict.problem,
                // The file the problem (and its line) is in.
                "file": verdict.at,
                "retention": verdict.retention,
                "head": verdict.head,
            })
        );
    } else if let Some(problem) = &verdict.problem {
        let file = verdict
            .at
            .as_deref()
            .unwrap_or(log.path().as_path())
            .display()
            .to_string();
        note!(
            "airlock: {file}: BROKEN after {}: {problem}",
            counted(verdict.records, "intact record", "intact records")
        );
    } else {
        let range = match (verdict.first, verdict.records) {
            (Some(first), n) if first > 1 && n > 0 => {
                format!(" ({first} to {})", first + n - 1)
            }
            _ => String::new(),
        };
        crate::shown::out!(
            "{place}: intact, {}{range}; last hash {}",
            counted(verdict.records, "record", "records"),
            verdict.head.as_deref().unwrap_or("-")
        );
        if let Some(retention) = retention {
            note!("airlock: {retention}: the chain starts after them, as that record says");
        }
    }
    Ok(if verdict.problem.is_some() {
        ExitCode::from(EXIT_BROKEN)
    } else {
        ExitCode::SUCCESS
    })
}

pub fn log(global: &GlobalArgs, args: LogArgs) -> Result<ExitCode> {
    match args.command {
        Some(LogCommand::Verify {
            json,
            from: Some(file),
        }) => return verify_exported(&file, json),
        Some(LogCommand::Export { follow, config }) => {
            return export(global, follow, config.as_deref())
        }
        Some(LogCommand::Prune { config }) => return prune(global, config.as_deref()),
        _ => {}
    }
    let state = state_dir(global)?;
    let log = airlock_core::audit::log(&state);
    if let Some(LogCommand::Verify { json, .. }) = args.command {
        return verify(&log, json);
    }
    let filter = Filter {
        session: args.session,
        profile: args.profile,
        since: args.since.as_deref().map(since).transpose()?,
        actions: args.action,
        denied: args.denied,
        token: args.token,
    };
    let (mut records, filter) = airlock_core::audit::records(&crate::run::caller(global), filter)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    loop {
        while let Some(record) = records.next_matching(&filter)? {
            if let Err(e) = print(&mut out, &record, args.json) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(ExitCode::SUCCESS);
                }
                bail!(e);
            }
        }
        if !args.follow {
            break;
        }
        if out.flush().is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        records.wait();
    }
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}
