//! `airlock diff`: a session's change set as a git patch, a summary, or JSON.

use std::io::{self, IsTerminal, Write};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Result;

use airlock_changes::patch::{self, LeftOut, WhyLeftOut};
use airlock_changes::{Change, Kind};
use airlock_core::DiffRequest;

use crate::cli::{ColorWhen, DiffArgs, GlobalArgs};
use crate::progress::Progress;
use crate::shown::{counted, note};

/// Colours of git's default diff palette.
const BOLD: &str = "\x1b[1m";
const CYAN: &str = "\x1b[36m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const RESET: &str = "\x1b[m";

/// Colour a patch as git does: headers bold, hunk headers cyan, removed red, added green.
fn colorize(patch: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(patch.len() + patch.len() / 8);
    let mut in_hunk = false;
    for line in patch.split_inclusive(|&b| b == b'\n') {
        let (body, newline) = match line.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (line, &b""[..]),
        };
        let color = if body.starts_with(b"diff --git ") {
            in_hunk = false;
            Some(BOLD)
        } else if body.starts_with(b"@@ ") {
            in_hunk = true;
            Some(CYAN)
        } else if !in_hunk {
            (!body.is_empty() && !body.starts_with(b"GIT binary patch")).then_some(BOLD)
        } else if body.starts_with(b"-") {
            Some(RED)
        } else if body.starts_with(b"+") {
            Some(GREEN)
        } else {
            None
        };
        match color {
            Some(color) if !body.is_empty() => {
                out.extend_from_slice(color.as_bytes());
                out.extend_from_slice(body);
                out.extend_from_slice(RESET.as_bytes());
            }
            _ => out.extend_from_slice(body),
        }
        out.extend_from_slice(newline);
    }
    out
}

/// Write `text` to stdout, through a pager when stdout is a terminal and the text is longer than
/// the screen, as git does. A reader that goes away (`| head`, quitting the pager) is not an error.
fn emit(text: &[u8], page: bool) -> Result<()> {
    let lines = text.iter().filter(|&&b| b == b'\n').count();
    let rows = std::env::var("LINES")
        .ok()
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(24);
    if page && lines >= rows {
        let pager = std::env::var("AIRLOCK_PAGER")
            .or_else(|_| std::env::var("PAGER"))
            .unwrap_or_else(|_| "less".into());
        if !pager.is_empty() && pager != "cat" {
            let mut command = Command::new("/bin/sh");
            command.arg("-c").arg(&pager).stdin(Stdio::piped());
            if std::env::var_os("LESS").is_none() {
                // Quit if one screen, keep colours, do not clear the screen: git's default.
                command.env("LESS", "FRX");
            }
            if let Ok(mut child) = command.spawn() {
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = stdin.write_all(text);
                }
                let _ = child.wait();
                return Ok(());
            }
        }
    }
    let mut stdout = io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

pub fn diff(global: &GlobalArgs, args: DiffArgs) -> Result<ExitCode> {
    let progress = Progress::start(
        format!("reading the changes of session {}", args.session),
        args.json,
    );
    let request = DiffRequest {
        session: args.session.clone(),
        paths: args.paths,
        no_ignored: args.no_ignored,
    };
    let diff = airlock_core::diff(&crate::run::caller(global), &request)?;
    let terminal = io::stdout().is_terminal();
    if args.json {
        let mut text = serde_json::to_vec_pretty(&diff.view(&args.session)?)?;
        text.push(b'\n');
        // Names and hashes, not content: nothing a person read (see remember_shown).
        drop(diff);
        emit(&text, false)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = Vec::new();
    if args.name_status {
        diff.write_name_status(&mut text)?;
        drop(progress);
        note_not_shown_by_git(&diff, &args.session)?;
    } else if args.stat {
        diff.write_stat(&mut text)?;
        drop(progress);
        note_not_shown_by_git(&diff, &args.session)?;
    } else {
        let left_out = diff.write_patch(&mut text)?;
        // The line is gone before anything else is said on stderr.
        drop(progress);
        note_not_shown_by_git(&diff, &args.session)?;
        for left in left_out {
            note!("airlock: {}", why_left_out(&left));
        }
        if terminal {
            // A person reads this: what would drive the terminal is shown, not obeyed.
            text = visible_controls(&text);
        }
        let color = match args.color {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => terminal && std::env::var_os("NO_COLOR").is_none(),
        };
        if color {
            text = colorize(&text);
        }
    }
    note_digest(&diff, &args.session);
    if !(args.name_status || args.stat) {
        remember_shown(&diff);
    }
    // The session is free for runs again while a person reads.
    drop(diff);
    emit(&text, terminal && !args.no_pager)?;
    Ok(ExitCode::SUCCESS)
}

/// Remember the diff as the last one shown, for an apply without --reviewed to say what it
/// writes that this diff did not hold. Not remembered, that apply says no diff was shown. Only
/// the patch is a diff shown: --stat, --name-status and --json give names, not content.
fn remember_shown(diff: &airlock_core::Diff) {
    if let Err(err) = diff.record_shown() {
        note!("airlock: warning: this diff is not remembered as shown ({err}): 'airlock apply' will say no diff was shown; --reviewed DIGEST still works");
    }
}

/// On stderr, apart from the patch (which `git apply` must still take as it is): the digest, and
/// how to apply exactly what was shown.
fn note_digest(diff: &airlock_core::Diff, session: &str) {
    let flag = if diff.no_ignored() {
        " --no-ignored"
    } else {
        ""
    };
    note!(
        "airlock: digest {digest}: 'airlock apply {}{flag} --reviewed {digest}' writes exactly this change set, or nothing",
        crate::shown::printable(session),
        digest = diff.digest()
    );
}

/// The trees git ignores, one line each: `.venv/  2675 files, 269 dirs, 31 executables, 40
/// hazards (hidden_from_git 38, symlink_outside 2)`.
fn note_trees(diff: &airlock_core::Diff, session: &str) {
    let trees = diff.trees();
    if trees.is_empty() {
        return;
    }
    let session = crate::shown::printable(session);
    note!(
        "airlock: trees git ignores, one row each, applied whole or not at all ('airlock apply {session} ROOT' writes one; 'airlock diff {session} ROOT' shows its changes):"
    );
    for tree in trees {
        let mut line = format!(
            "  {}/  {}, {}, {}, {}",
            crate::shown::printable(&tree.root),
            counted(tree.files as u64, "file", "files"),
            counted(tree.dirs as u64, "dir", "dirs"),
            counted(tree.executables as u64, "executable", "executables"),
            counted(tree.hazards as u64, "hazard", "hazards"),
        );
        if tree.deleted > 0 {
            line.push_str(&format!(", {} deleted", tree.deleted));
        }
        if !tree.hazard_counts.is_empty() {
            let kinds: Vec<String> = tree
                .hazard_counts
                .iter()
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect();
            line.push_str(&format!(" ({})", kinds.join(", ")));
        }
        note!("{line}");
    }
}

/// On stderr, apart from the patch (which `git apply` must still take): the changes the
/// repository's ignore rules hide from `git status`, with their hazards, and the trees it
/// ignores as one row each.
fn note_not_shown_by_git(diff: &airlock_core::Diff, session: &str) -> Result<()> {
    note_trees(diff, session);
    let hidden = diff.not_shown_by_git()?;
    if hidden.is_empty() {
        return Ok(());
    }
    note!(
        "airlock: not shown by git status ({} ignored by the repository's rules; 'airlock apply --no-ignored' leaves them out):",
        hidden.len()
    );
    for (change, verdict) in hidden {
        let hazards: Vec<String> = verdict
            .hazards
            .iter()
            .filter_map(|h| serde_json::to_value(h).ok())
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let path = crate::shown::printable(&change.path.to_string_lossy());
        match hazards.is_empty() {
            true => note!("  {} {path}", change.status.letter()),
            false => note!(
                "  {} {path}  (HAZARD: {})",
                change.status.letter(),
                hazards.join(", ")
            ),
        }
    }
    Ok(())
}

/// `text` with every control character a terminal acts on shown as `cat -v` shows it (`^[` for
/// ESC, `^M` for a carriage return that does not end a line, `^?` for DEL, `M-^[` for a C1
/// control, as UTF-8 or as a byte outside it); tabs, newlines and form feeds stay as they are.
fn visible_controls(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let b = text[at];
        let next = text.get(at + 1).copied();
        // A whole UTF-8 character here, if there is one: its bytes are kept together.
        let char_len = (2..=4)
            .find(|&len| {
                text.get(at..at + len)
                    .is_some_and(|bytes| std::str::from_utf8(bytes).is_ok())
            })
            .filter(|_| b >= 0x80);
        match (b, char_len) {
            (b'\t' | b'\n' | 0x0c, _) => out.push(b),
            (b'\r', _) if next == Some(b'\n') => out.push(b),
            (0x00..=0x1f, _) => out.extend_from_slice(&[b'^', b + 0x40]),
            (0x7f, _) => out.extend_from_slice(b"^?"),
            // U+0080..U+009F: 0xc2 then the control's own byte.
            (0xc2, Some(2)) if next.is_some_and(|n| n <= 0x9f) => {
                out.extend_from_slice(&[b'M', b'-', b'^', next.unwrap_or(0x80) - 0x40]);
                at += 2;
                continue;
            }
            (_, Some(len)) => {
                out.extend_from_slice(&text[at..at + len]);
                at += len;
                continue;
            }
            (0x80..=0x9f, None) => out.extend_from_slice(&[b'M', b'-', b'^', b - 0x40]),
            _ => out.push(b),
        }
        at += 1;
    }
    out
}

/// What the patch left out of a change, and where to see it.
fn why_left_out(left: &LeftOut) -> String {
    let path = crate::shown::printable(&left.change.path.to_string_lossy());
    let mib = |bytes: u64| bytes / (1024 * 1024);
    match left.why {
        WhyLeftOut::Special => format!(
            "{path}: a {} cannot be expressed in a git patch; see 'airlock diff --json'",
            kind_name(&left.change)
        ),
        WhyLeftOut::TooLarge => format!(
            "{path}: {} bytes, more than a patch carries of one file ({} MiB): left out; see 'airlock diff --json'",
            patch::file_sizes(&left.change).0,
            mib(patch::LARGEST_FILE_CARRIED)
        ),
        WhyLeftOut::PatchFull => format!(
            "{path}: left out: the patch already carries {} MiB of content; name fewer paths ('airlock diff SESSION PATH...') or see 'airlock diff --json'",
            mib(patch::MOST_CONTENT_CARRIED)
        ),
    }
}

fn kind_name(change: &Change) -> &'static str {
    let kind = change.new.as_ref().or(change.old.as_ref()).map(|n| n.kind);
    match kind {
        Some(Kind::Fifo) => "fifo",
        Some(Kind::Socket) => "socket",
        Some(Kind::CharDevice) => "character device",
        Some(Kind::BlockDevice) => "block device",
        _ => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert_eq!(
            visible_controls(b"+ok\n+\x1b[1A\x1b[2Kcurl|sh\r\n+a\rb\x7f\t\n"),
            b"+ok\n+^[[1A^[[2Kcurl|sh\r\n+a^Mb^?\t\n"
        );
        assert_eq!(visible_controls("\u{9b}2J".as_bytes()), b"M-^[2J");
        assert_eq!(
            visible_controls("caf\u{e9}".as_bytes()),
            "caf\u{e9}".as_bytes()
        );
    }
}
