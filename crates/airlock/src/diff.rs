//! `airlock diff`: a session's change set as a git patch, a summary, or JSON.

use airlock_jail::note;
use std::io::{self, IsTerminal, Write};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Result;
use serde::Serialize;
use sha2::{Digest, Sha256};

use airlock_changes::patch::{self, Roots};
use airlock_changes::{hazard, Change, Hazard, Kind, Node, Status};
use airlock_core::{read_changes, relative_paths, Session, MAX_FILE_BYTES};

use crate::cli::{ColorWhen, DiffArgs, GlobalArgs};
use crate::run::state_dir;

/// One side of a change, as `--json` shows it.
#[derive(Serialize)]
struct Side {
    kind: Kind,
    /// Permission bits in octal, with setuid/setgid/sticky: "0644".
    mode: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
}

#[derive(Serialize)]
struct JsonChange {
    path: String,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    old: Option<Side>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new: Option<Side>,
    hazards: Vec<Hazard>,
}

fn side(root: &std::path::Path, change: &Change, node: &Option<Node>) -> io::Result<Option<Side>> {
    let Some(node) = node else {
        return Ok(None);
    };
    let sha256 = if node.kind == Kind::File {
        let mut file = airlock_changes::node::open_regular(&root.join(&change.path))?;
        let mut hasher = Sha256::new();
        io::copy(&mut file, &mut hasher)?;
        Some(
            hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        )
    } else {
        None
    };
    Ok(Some(Side {
        kind: node.kind,
        mode: format!("{:04o}", node.mode),
        size: node.size,
        sha256,
        target: node
            .target
            .as_ref()
            .map(|t| t.to_string_lossy().into_owned()),
    }))
}

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
    let state = state_dir(global)?;
    let mut session = Session::find(&state, &args.session)?;
    let read = read_changes(&mut session, &|s: &Session| {
        note!(
            "airlock: session {} is busy with a run; waiting for it to end…",
            s.id
        )
    })?;
    let filters = relative_paths(
        &args.paths,
        &read.workspace,
        std::env::current_dir().ok().as_deref(),
    )?;
    let mut set = read.changes;
    set.filter(&filters);
    let roots = Roots {
        host: &read.workspace,
        layer: &read.layer,
    };
    let terminal = io::stdout().is_terminal();

    if args.json {
        let mut out = Vec::new();
        for change in &set.changes {
            out.push(JsonChange {
                path: change.path.to_string_lossy().into_owned(),
                status: change.status,
                old: side(roots.host, change, &change.old)?,
                new: side(roots.layer, change, &change.new)?,
                hazards: hazard::hazards(change, MAX_FILE_BYTES),
            });
        }
        let mut text = serde_json::to_vec_pretty(&out)?;
        text.push(b'\n');
        emit(&text, false)?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut text = Vec::new();
    if args.name_status {
        patch::write_name_status(&mut text, &set.changes)?;
    } else if args.stat {
        patch::write_stat(&mut text, roots, &set.changes)?;
    } else {
        let inexpressible = patch::write_patch(&mut text, roots, &set.changes)?;
        for change in inexpressible {
            note!(
                "airlock: {}: a {} cannot be expressed in a git patch; see 'airlock diff --json'",
                change.path.display(),
                kind_name(&change)
            );
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
    drop(read.lock);
    emit(&text, terminal && !args.no_pager)?;
    Ok(ExitCode::SUCCESS)
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
