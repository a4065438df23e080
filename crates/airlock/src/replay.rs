//! `airlock policy replay`: core replays; this prints what it found.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use airlock_core::replay::{Replay, ReplayRequest, ReplayedDestination, ReplayedRun};
use airlock_core::ProfileChoice;

use crate::cli::{GlobalArgs, PolicyReplayArgs};
use crate::shown::{command_line, counted, note, printable};

/// The draft would refuse something the runs needed.
const EXIT_WOULD_REFUSE: u8 = 1;
/// The draft, the log or an argument is not what it must be.
const EXIT_BAD_INPUT: u8 = 2;
/// The characters of a run's command line the text report shows.
const COMMAND_LINE_SHOWN: usize = 100;

/// Bad input: said on stderr (and as JSON when asked), exit 2.
fn bad_input(json: bool, error: &str, code: Option<&str>) -> ExitCode {
    note!("airlock: {error}");
    if json {
        let mut said = json!({ "error": error, "exit_status": EXIT_BAD_INPUT });
        if let Some(code) = code {
            said["code"] = code.into();
        }
        crate::shown::out!("{said}");
    }
    ExitCode::from(EXIT_BAD_INPUT)
}

pub fn replay(global: &GlobalArgs, args: PolicyReplayArgs) -> Result<ExitCode> {
    let caller = crate::run::caller(global);
    let choice = if args.profile.contains('/') {
        ProfileChoice {
            name: None,
            file: Some(PathBuf::from(&args.profile)),
        }
    } else {
        ProfileChoice {
            name: Some(args.profile.clone()),
            file: None,
        }
    };
    let draft = match airlock_core::effective_profile(&caller, &choice) {
        Ok(draft) => draft,
        // The message names the file, the line and column, and what to do.
        Err(err @ airlock_core::Error::Policy(_)) => {
            return Ok(bad_input(args.json, &err.to_string(), Some(err.code().0)))
        }
        Err(err) => return Err(err.into()),
    };
    let since = match args.since.as_deref().map(crate::log::since).transpose() {
        Ok(since) => since,
        Err(err) => return Ok(bad_input(args.json, &format!("{err:#}"), None)),
    };
    let from_file = args.log.is_some();
    let request = ReplayRequest {
        profile: args.runs_of,
        session: args.session,
        since,
        log: args.log,
    };
    let replayed = match airlock_core::replay::replay(&caller, &draft, request) {
        Ok(replayed) => replayed,
        Err(err @ airlock_core::Error::Audit(_)) if from_file => {
            return Ok(bad_input(args.json, &err.to_string(), Some(err.code().0)))
        }
        Err(err) => return Err(err.into()),
    };
    let printed = if args.json {
        serde_json::to_string_pretty(&replayed)? + "\n"
    } else {
        report(&replayed, &args.profile)
    };
    // A reader that went away (`| head`) takes nothing from the verdict: the exit status says it.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), printed.as_bytes());
    if !args.json && replayed.runs == 0 {
        note!(
            "airlock: no network attempt of a run of profile {} in the records read: nothing was replayed (another profile's runs: --runs-of NAME)",
            printable(&replayed.runs_of)
        );
    }
    Ok(if replayed.breaks() {
        ExitCode::from(EXIT_WOULD_REFUSE)
    } else {
        ExitCode::SUCCESS
    })
}

/// The report a person reads.
fn report(replayed: &Replay, draft: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of profile {} ({}) replayed against {}",
        counted(replayed.runs as u64, "run", "runs"),
        printable(&replayed.runs_of),
        counted(replayed.attempts, "network attempt", "network attempts"),
        printable(draft),
    );
    if replayed.breaks() {
        let _ = writeln!(
            out,
            "\nWOULD REFUSE what the runs needed (allowed then, refused now):"
        );
        destinations(&mut out, &replayed.would_refuse);
        let _ = writeln!(out, "\nruns it would break:");
        for broken in &replayed.runs_broken {
            let _ = writeln!(
                out,
                "  {}\n      loses {}",
                run(&broken.run),
                printable(&broken.destinations.join(", "))
            );
        }
    } else {
        let _ = writeln!(out, "\nnothing the runs needed would be refused");
    }
    if !replayed.would_now_allow.is_empty() {
        let _ = writeln!(
            out,
            "\nwould now allow (refused then, allowed by the draft):"
        );
        destinations(&mut out, &replayed.would_now_allow);
    }
    if !replayed.never_used.is_empty() {
        let _ = writeln!(
            out,
            "\nallows, never used (no attempt of these runs went through them):"
        );
        for entry in &replayed.never_used {
            let _ = writeln!(out, "  allow {}", printable(entry));
        }
    }
    if replayed.not_replayed > 0 {
        let _ = writeln!(
            out,
            "\n{} counted in a flood without their destination, not replayed ('airlock log --action net.suppressed')",
            counted(replayed.not_replayed, "network event was", "network events were")
        );
    }
    out
}

fn destinations(out: &mut String, list: &[ReplayedDestination]) {
    for destination in list {
        let target = match destination.stage {
            "dns" => format!("{} (DNS)", destination.target()),
            _ => destination.target(),
        };
        let _ = writeln!(
            out,
            "  {}  {} in {}",
            printable(&target),
            counted(destination.attempts, "attempt", "attempts"),
            counted(destination.runs.len() as u64, "run", "runs"),
        );
        let _ = writeln!(out, "      then: {}", printable(&destination.then));
        let _ = writeln!(out, "      now:  {}", printable(&destination.now));
        if let Some(note) = &destination.note {
            let _ = writeln!(out, "      {note}");
        }
        for replayed in &destination.runs {
            let _ = writeln!(out, "      {}", run(replayed));
        }
    }
}

/// `run #12 2026-12-01 10:00:00 session 3f2a…: pip download six`
fn run(run: &ReplayedRun) -> String {
    let id = run.intent_seq.map_or_else(
        || "run (intent not read)".to_string(),
        |seq| format!("run #{seq}"),
    );
    let time = run.time.as_deref().unwrap_or("-");
    let time = time.get(..19).unwrap_or(time).replace('T', " ");
    let session = match &run.session {
        Some(session) => format!(" session {}", printable(session)),
        None => String::new(),
    };
    let argv = if run.argv.is_empty() {
        String::new()
    } else {
        // One line per run: a long command line is cut (--json has it whole).
        let line = printable(&command_line(&run.argv));
        match line.char_indices().nth(COMMAND_LINE_SHOWN) {
            Some((cut, _)) => format!(": {}…", &line[..cut]),
            None => format!(": {line}"),
        }
    };
    format!(
        "{id} {time}{session}{argv} ({})",
        counted(run.attempts, "attempt", "attempts")
    )
}
