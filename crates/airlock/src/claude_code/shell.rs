//! `airlock claude-code shell`, Claude Code's CLAUDE_CODE_SHELL_PREFIX: one Bash tool call,
//! run by `airlock run --session` in the Claude Code session's airlock session.
//!
//! Claude Code 2.1.328 runs the prefix's words with its whole invocation as one more argument:
//!
//! ```text
//! source ~/.claude/shell-snapshots/snapshot-bash-….sh 2>/dev/null || true && [export … from
//! CLAUDE_ENV_FILE] … && eval '<command>' < /dev/null && pwd -P >| /tmp/claude-XXXX-cwd
//! ```
//!
//! Two parts of it name host files the sandbox cannot reach: the snapshot (the user's shell
//! functions and aliases, under the user's home) is left out, and the cwd file, which Claude
//! Code reads after the call to know where the next one starts, is written here on the host
//! from the sandbox's `pwd -P`, carried out on stderr behind a marker of this call. The
//! workspace appears inside the sandbox at its own path, so a directory of the workspace is the
//! same path on both sides; a directory the host does not have (made in the session only) or
//! outside the workspace is not one the next call can start in on the host, and the cwd falls
//! back to the nearest one of the workspace that is.
//!
//! Never a fallback: if the session cannot be had or `airlock run` refuses or fails, the
//! command does not run, and the exit status (125) and message say why.

use std::io::{BufRead as _, BufReader, Write};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context as _, Result};

use super::{attach, ShellArgs, Target};
use crate::cli::GlobalArgs;
use crate::run::caller;

/// What of Claude Code's invocation runs in the sandbox, and where Claude Code wants the cwd.
#[derive(Debug, PartialEq, Eq)]
struct Invocation {
    script: String,
    cwd_file: Option<PathBuf>,
}

const SNAPSHOT_TAIL: &str = " 2>/dev/null || true && ";
const CWD_WRITE: &str = " && pwd -P >| ";

/// Claude Code's invocation without the snapshot's `source` and the cwd file's write. Only the
/// exact shapes Claude Code puts at the start and the end are taken out: the command itself
/// lies between them and is left as it is.
fn split(invocation: &str) -> Invocation {
    let mut script = invocation;
    if let Some(rest) = script.strip_prefix("source ") {
        if let Some((path, after)) = rest.split_once(SNAPSHOT_TAIL) {
            if !path.contains(char::is_whitespace) && path.contains("/shell-snapshots/") {
                script = after;
            }
        }
    }
    let mut cwd_file = None;
    if let Some((before, file)) = script.rsplit_once(CWD_WRITE) {
        let path = Path::new(file);
        let named_so = path.is_absolute()
            && path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("claude-") && name.ends_with("-cwd"))
            && !file.contains(char::is_whitespace);
        if named_so {
            cwd_file = Some(path.to_path_buf());
            script = before;
        }
    }
    Invocation {
        script: script.to_string(),
        cwd_file,
    }
}

pub fn shell(global: &GlobalArgs, args: ShellArgs) -> Result<ExitCode> {
    let [invocation] = <[String; 1]>::try_from(args.invocation).map_err(|words| {
        anyhow::anyhow!(
            "expected Claude Code's shell invocation as one argument, got {} words: nothing was run",
            words.len()
        )
    })?;
    let claude_session = std::env::var("CLAUDE_CODE_SESSION_ID").context(
        "CLAUDE_CODE_SESSION_ID is not set: this runs as Claude Code's CLAUDE_CODE_SHELL_PREFIX only; nothing was run",
    )?;
    let target = Target {
        workspace: args.workspace,
        profile: Some(args.profile),
    };
    let session = attach(&caller(global), &target, &claude_session)?;
    let Invocation { script, cwd_file } = split(&invocation);
    let marker = format!("::airlock-cwd-{}::", std::process::id());
    let script = match cwd_file {
        Some(_) => format!("{script} && printf '%s%s\\n' '{marker}' \"$(pwd -P)\" >&2"),
        None => script,
    };
    let (status, inside_cwd) = run_in_session(global, &target, &session, &script, &marker)?;
    if let (Some(file), Some(inside)) = (cwd_file, inside_cwd) {
        let host = host_cwd(&target, Path::new(&inside));
        if host != Path::new(&inside) {
            // Part of the command's output: the agent learns why its next command starts there.
            eprintln!(
                "airlock: {inside} is not a directory of the host's workspace (made in the airlock session, or outside the workspace): the next command starts in {}",
                host.display()
            );
        }
        std::fs::write(&file, format!("{}\n", host.display()))
            .with_context(|| format!("cannot write Claude Code's cwd file {}", file.display()))?;
    }
    Ok(status)
}

/// `airlock run --session SESSION --profile P -- /bin/bash -c SCRIPT` by this same binary, its stdout
/// passed through and its stderr too, but for the marker's line, whose rest is the cwd.
fn run_in_session(
    global: &GlobalArgs,
    target: &Target,
    session: &str,
    script: &str,
    marker: &str,
) -> Result<(ExitCode, Option<String>)> {
    let airlock =
        std::env::current_exe().context("cannot find this airlock binary (/proc/self/exe)")?;
    let mut command = Command::new(&airlock);
    if let Some(state_dir) = &global.state_dir {
        command.arg("--state-dir").arg(state_dir);
    }
    // Here, as the hooks are: not a server AIRLOCK_URL may name in Claude Code's environment.
    command
        .env_remove("AIRLOCK_URL")
        .args(crate::agent::run_args(target, session, script.as_ref()))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {} run: nothing was run", airlock.display()))?;
    let stderr = child
        .stderr
        .take()
        .context("no pipe for the run's stderr")?;
    let inside_cwd = relay_stderr(stderr, &mut std::io::stderr().lock(), marker);
    let status = child.wait().context("cannot wait for airlock run")?;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => i32::from(crate::EXIT_AIRLOCK_ERROR),
    };
    let code = u8::try_from(code).unwrap_or(crate::EXIT_AIRLOCK_ERROR);
    Ok((ExitCode::from(code), inside_cwd?))
}

/// Copies the run's stderr to ours as it comes, line by line, keeping back the marker and what
/// follows it on its line: the sandbox's cwd. The last such line counts.
fn relay_stderr(
    stderr: impl std::io::Read,
    out: &mut impl Write,
    marker: &str,
) -> Result<Option<String>> {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut cwd = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .context("cannot read the run's stderr")?;
        if read == 0 {
            return Ok(cwd);
        }
        let text = String::from_utf8_lossy(&line);
        let shown = match text.find(marker) {
            Some(at) => {
                cwd = Some(text[at + marker.len()..].trim_end_matches('\n').to_string());
                &line[..at]
            }
            None => &line[..],
        };
        // Claude Code may have gone away (an interrupted call): the run goes on to its end.
        let _ = out.write_all(shown).and_then(|()| out.flush());
    }
}

/// Where on the host the next call starts: the sandbox's directory if the host has it within
/// the workspace, else its nearest ancestor that is, else the workspace itself. The directory
/// is the command's word (it can print the marker itself), so it is judged as the host
/// resolves it: `..` and the host's symlinks followed, then within the workspace or not.
fn host_cwd(target: &Target, inside: &Path) -> PathBuf {
    let workspace = target
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| target.workspace.clone());
    if !inside.is_absolute() || !inside.starts_with(&workspace) {
        return workspace;
    }
    inside
        .ancestors()
        .take_while(|dir| dir.starts_with(&workspace))
        .filter_map(|dir| dir.canonicalize().ok())
        .find(|dir| dir.starts_with(&workspace) && dir.is_dir())
        .unwrap_or(workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEN: &str = "source /root/.claude/shell-snapshots/snapshot-bash-1796188014659-cpk9mf.sh 2>/dev/null || true && export MYVAR=fromenvfile\n: && { \\builtin shopt -u extglob || \\builtin setopt NO_EXTENDED_GLOB; } >/dev/null 2>&1 || true && eval 'cd sub && echo hi > f.txt' < /dev/null && pwd -P >| /tmp/claude-1d80-cwd";

    #[test]
    fn the_snapshot_and_the_cwd_write_of_claude_code_2_1_328_are_taken_out() {
        let split = split(SEEN);
        assert_eq!(split.cwd_file, Some(PathBuf::from("/tmp/claude-1d80-cwd")));
        assert!(split.script.starts_with("export MYVAR=fromenvfile\n: && "));
        assert!(split
            .script
            .ends_with("eval 'cd sub && echo hi > f.txt' < /dev/null"));
    }

    #[test]
    fn what_is_not_claude_codes_shape_is_left_alone() {
        for plain in [
            "echo hi",
            "source ./env.sh 2>/dev/null || true && make",
            "make && pwd -P >| /etc/passwd",
            "make && pwd -P >| /tmp/claude-1-cwd; rm -rf x",
        ] {
            assert_eq!(
                split(plain),
                Invocation {
                    script: plain.into(),
                    cwd_file: None
                },
                "{plain}"
            );
        }
    }

    #[test]
    fn the_cwd_is_kept_back_from_stderr_and_the_rest_passed_on() {
        let input = b"warning: x\npartial::airlock-cwd-7::/ws/sub\n".as_slice();
        let mut passed_on = Vec::new();
        let cwd = relay_stderr(input, &mut passed_on, "::airlock-cwd-7::").unwrap();
        assert_eq!(cwd.as_deref(), Some("/ws/sub"));
        assert_eq!(passed_on, b"warning: x\npartial");
    }

    #[test]
    fn a_cwd_the_host_lacks_falls_back_within_the_workspace() {
        let workspace = std::env::temp_dir().join(format!("airlock-cc-{}", std::process::id()));
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        let target = Target {
            workspace: workspace.clone(),
            profile: None,
        };
        assert_eq!(
            host_cwd(&target, &workspace.join("sub")),
            workspace.join("sub")
        );
        assert_eq!(
            host_cwd(&target, &workspace.join("sub/only-in-session/deeper")),
            workspace.join("sub")
        );
        assert_eq!(host_cwd(&target, Path::new("/tmp")), workspace);
        assert_eq!(host_cwd(&target, Path::new("relative")), workspace);
        std::fs::remove_dir_all(&workspace).unwrap();
    }

    /// The cwd line comes from inside the sandbox, where the command can print the marker (it
    /// is in the script's own argv) and exit before airlock's printf: what it says is the
    /// agent's, and must not name a host directory outside the workspace.
    #[test]
    fn a_forged_cwd_cannot_leave_the_workspace_by_dot_dot_or_a_symlink() {
        let base = std::env::temp_dir().join(format!("airlock-cc-forged-{}", std::process::id()));
        let workspace = base.join("ws");
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), workspace.join("link")).unwrap();
        let target = Target {
            workspace: workspace.clone(),
            profile: None,
        };
        for forged in [
            "sub/../../outside",
            "../outside",
            "link",
            "link/.",
            "sub/../link",
        ] {
            let host = host_cwd(&target, &workspace.join(forged));
            assert_eq!(host, workspace, "{forged}");
        }
        assert_eq!(
            host_cwd(&target, &workspace.join("sub/./x/..")),
            workspace.join("sub")
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
