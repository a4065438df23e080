//! `airlock learn`: a learning run asked of core, and the profile it proposes written where the
//! person said, with what was learned told on stderr.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};

use airlock_core::RunRequest;

use crate::cli::{GlobalArgs, LearnArgs};
use crate::run::{caller, profile_choice};
use crate::shown::{note, printable};

pub fn learn(global: &GlobalArgs, mut args: LearnArgs) -> Result<ExitCode> {
    // Where the profile goes is checked before the run, which opens the network for nothing
    // if its result cannot be kept.
    if let Some(out) = &args.out {
        if out.symlink_metadata().is_ok() {
            bail!(
                "{} exists: choose a new file for --out, or add to it with --extend {}",
                out.display(),
                out.display()
            );
        }
        let dir = parent(out);
        if !dir.is_dir() {
            bail!(
                "{}: no such directory for --out {}",
                dir.display(),
                out.display()
            );
        }
    }
    // The file itself is extended, not a link to it (which the rename would replace).
    if let Some(extend) = &args.extend {
        args.extend = Some(
            extend
                .canonicalize()
                .with_context(|| format!("cannot find --extend {}", extend.display()))?,
        );
    }
    let request = RunRequest {
        argv: args.command,
        profile: profile_choice(&args.choice),
        workspace: args.choice.workspace,
        resolve: args.resolve,
        ..RunRequest::default()
    };
    let learned = airlock_core::learn(&caller(global), request, args.extend.as_deref())?;
    let report = &learned.report;
    for line in report.end().notes() {
        note!("airlock: {}", printable(&line));
    }
    match args.out.as_deref().or(args.extend.as_deref()) {
        Some(file) => write_new(file, &learned.proposal, args.extend.is_some())?,
        None => std::io::stdout()
            .write_all(learned.proposal.as_bytes())
            .or_else(|e| match e.kind() {
                // A reader that went away took what it wanted.
                std::io::ErrorKind::BrokenPipe => Ok(()),
                _ => Err(e),
            })
            .context("cannot write the profile to stdout")?,
    }
    tell(&learned, args.out.as_deref().or(args.extend.as_deref()));
    let status = report.exit_status();
    if status != 0 {
        note!(
            "airlock: warning: the command exited with {status}: what it needs may be more than it reached"
        );
    }
    Ok(ExitCode::from(
        u8::try_from(status).unwrap_or(crate::EXIT_AIRLOCK_ERROR),
    ))
}

/// What was learned, for the person: the hosts, the limits, where the profile is.
fn tell(learned: &airlock_core::Learned, written: Option<&Path>) {
    for line in &learned.summary {
        note!("airlock: learned: {}", printable(line));
    }
    if let Some(file) = written {
        note!(
            "airlock: wrote {}: read it, then 'airlock run --profile-file {} -- COMMAND'",
            file.display(),
            file.display()
        );
    }
}

/// Write `text` to `file` through a new file beside it, renamed over it (`replace`, for
/// --extend) or linked to its name, which must be free: a reader never sees half a profile, and
/// a file of that name made meanwhile is never overwritten.
fn write_new(file: &Path, text: &str, replace: bool) -> Result<()> {
    let dir = parent(file);
    let temp = dir.join(format!(".airlock-learn.{}", std::process::id()));
    // An extended profile keeps its mode (a private one stays private).
    let mode = match replace {
        true => std::fs::metadata(file).map_or(0o644, |m| m.permissions().mode() & 0o7777),
        false => 0o644,
    };
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e).with_context(|| format!("cannot write {}", temp.display()));
    }
    let placed = if replace {
        std::fs::rename(&temp, file)
    } else {
        std::fs::hard_link(&temp, file)
    };
    let _ = std::fs::remove_file(&temp);
    placed.with_context(|| format!("cannot write {}", file.display()))
}

/// The directory `file` is in (`.` for a bare name).
fn parent(file: &Path) -> &Path {
    file.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
