//! The text of each answer, for the model to read (the same answer is also structured content).

use crate::runs::{PollAnswer, RunResult};
use crate::tools::{Changes, Log};

fn status_line(result: &RunResult) -> String {
    let mut line = format!("exit status {}", result.exit_code);
    if let Some(limit) = &result.limit {
        line.push_str(&format!(" (ended by the {limit} limit)"));
    }
    line.push_str(&format!(", {} ms", result.duration_ms));
    line
}

fn stream(out: &mut String, name: &str, text: &str, truncated: bool) {
    if text.is_empty() && !truncated {
        return;
    }
    out.push_str(&format!("--- {name} ---\n{text}"));
    if !text.ends_with('\n') && !text.is_empty() {
        out.push('\n');
    }
    if truncated {
        out.push_str(&format!(
            "({name} was cut: more came than airlock keeps of a run)\n"
        ));
    }
}

pub fn run(result: &RunResult) -> String {
    let mut out = status_line(result);
    out.push('\n');
    for note in &result.notes {
        out.push_str(&format!("airlock: {note}\n"));
    }
    stream(&mut out, "stdout", &result.stdout, result.stdout_truncated);
    stream(&mut out, "stderr", &result.stderr, result.stderr_truncated);
    out.push_str(&result.review);
    out
}

pub fn poll(answer: &PollAnswer) -> String {
    let mut out = String::new();
    stream(&mut out, "stdout", &answer.stdout, false);
    stream(&mut out, "stderr", &answer.stderr, false);
    match &answer.result {
        None => out.push_str(&format!(
            "Run {} goes on: poll it again for the rest.",
            answer.run
        )),
        Some(result) => {
            out.push_str(&format!(
                "Run {} ended: {}\n",
                answer.run,
                status_line(result)
            ));
            stream(&mut out, "stdout", "", result.stdout_truncated);
            stream(&mut out, "stderr", "", result.stderr_truncated);
            out.push_str(&result.review);
        }
    }
    out
}

pub fn changes(changes: &Changes) -> String {
    let Some(session) = &changes.session else {
        return changes.review.clone();
    };
    if changes.files.is_empty() {
        return format!(
            "Nothing changed in airlock session {session} (page {} of {}).",
            changes.page, changes.pages
        );
    }
    let mut out = format!(
        "Airlock session {session}: page {} of {} of the changed files\n",
        changes.page, changes.pages
    );
    for file in &changes.files {
        let path = file.get("path").and_then(|p| p.as_str()).unwrap_or("?");
        let status = file.get("status").and_then(|s| s.as_str()).unwrap_or("?");
        out.push_str(&format!("  {status:<9} {path}"));
        if let Some(hazards) = file.get("hazards").and_then(|h| h.as_array()) {
            if !hazards.is_empty() {
                let named: Vec<String> = hazards.iter().map(|h| h.to_string()).collect();
                out.push_str(&format!("  (hazards: {})", named.join(", ")));
            }
        }
        out.push('\n');
    }
    out.push_str(&changes.patch);
    if !changes.patch.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&changes.review);
    out
}

pub fn log(log: &Log) -> String {
    let Some(session) = &log.session else {
        return "No command has run yet: the log has nothing of this client.".into();
    };
    let mut out = format!("Audit records of airlock session {session}:\n");
    for record in &log.records {
        out.push_str(&record.to_string());
        out.push('\n');
    }
    out
}
