//! `airlock claude-code`: Claude Code's Bash tool runs in the workspace's airlock session, and
//! nothing runs on the host when airlock is missing, disabled or broken.
//!
//! `settings` prints what Claude Code needs (`claude --settings FILE`): CLAUDE_CODE_SHELL_PREFIX
//! names `airlock claude-code shell`, which Claude Code runs with the whole shell invocation of
//! each Bash call as its last argument and which runs that invocation with `airlock run` in the
//! session; hooks (`airlock claude-code hook EVENT`) attach the session at the start, refuse a
//! tool call before it runs when core would refuse its run, and say at the end how to review.
//! The file tools (Read, Edit, Write, …) would act on the host's files: they are denied, by the
//! settings' own permission rules (which need no airlock binary to hold) and by the hook (which
//! says why: use Bash). docs/claude-code.md has the why of each choice and what was observed of
//! Claude Code 2.1.328.

mod hook;
mod shell;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use airlock_core::Caller;

pub use crate::agent::Target;
use crate::agent::{text, this_binary};
use crate::cli::GlobalArgs;

#[derive(Debug, Subcommand)]
pub enum ClaudeCodeCommand {
    /// Print settings that run every Bash call of Claude Code in an airlock session
    #[command(
        long_about = "Print the settings JSON that makes Claude Code run every Bash tool \
        call inside the workspace's airlock session, for 'claude --settings FILE' or to merge \
        into ~/.claude/settings.json (a user-level file: a project's .claude/ lies in the \
        workspace the agent edits).\n\n\
        Each Claude Code session gets an airlock session of its own, named claude-<its id>, \
        created at its start: its changes reach DIR only through 'airlock diff' and 'airlock \
        apply'. Read, Edit, Write, MultiEdit, NotebookEdit, Glob and Grep are denied (they \
        would act on the host's files, outside the session): the agent uses Bash for them. \
        Fail closed: the settings name this airlock binary by its absolute path, and when it \
        is missing, the profile is disabled or the run is refused, the command does not run. \
        See docs/claude-code.md."
    )]
    Settings(SettingsArgs),
    /// Run one Claude Code shell invocation in the session (CLAUDE_CODE_SHELL_PREFIX)
    #[command(hide = true)]
    Shell(ShellArgs),
    /// Answer one Claude Code hook (SessionStart, PreToolUse, SessionEnd)
    #[command(hide = true)]
    Hook(HookArgs),
}

#[derive(Debug, Args)]
pub struct SettingsArgs {
    #[command(flatten)]
    pub target: Target,
    /// A tool the hook lets through besides the ones it knows (an MCP server's tool,
    /// `mcp__github__create_issue`, or a tool a newer Claude Code brings): it runs on the host,
    /// outside airlock, so name only what you trust; repeat for more
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub allow_tools: Vec<String>,
    /// A failure as JSON on stdout too (the settings are JSON either way)
    #[arg(long)]
    pub json: bool,
}

/// Positional, not options: see [`shell_prefix`] for how Claude Code reads the prefix.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// The workspace
    pub workspace: PathBuf,
    /// The profile, by name
    pub profile: String,
    /// Claude Code's whole shell invocation, as one argument
    #[arg(required = true, allow_hyphen_values = true, trailing_var_arg = true)]
    pub invocation: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookEvent {
    SessionStart,
    PreToolUse,
    SessionEnd,
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// Which hook Claude Code runs
    #[arg(value_enum)]
    pub event: HookEvent,
    #[command(flatten)]
    pub target: Target,
    /// A tool let through besides the ones the hook knows (see `settings --allow-tool`)
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub allow_tools: Vec<String>,
}

/// Tools the hook lets through without a word: they act on no file and run no command on the
/// host (Claude Code's own planning, questions, subagents — whose tool calls come through this
/// hook in turn — and its background Bash's output). Any tool not named here, in the file
/// tools or `--allow-tool` is denied: a tool a new Claude Code version adds, or an MCP server's,
/// is refused until a person has looked at it.
pub const QUIET_TOOLS: [&str; 13] = [
    "Task",
    "Agent",
    "TodoWrite",
    "TodoRead",
    "ExitPlanMode",
    "EnterPlanMode",
    "AskUserQuestion",
    "BashOutput",
    "KillShell",
    "KillBash",
    "WebSearch",
    "WebFetch",
    "Skill",
];

/// The tools that read or write files on the host, outside the session: denied, by the
/// settings' permission rules and by the hook.
pub const FILE_TOOLS: [&str; 6] = ["Read", "Edit", "Write", "NotebookEdit", "Glob", "Grep"];

/// File tools of other Claude Code versions, denied by the hook only: a permission rule naming
/// a tool 2.1.328 does not have makes it warn on every start ("matches no known tool").
pub const OTHER_FILE_TOOLS: [&str; 3] = ["MultiEdit", "LS", "NotebookRead"];

pub fn dispatch(global: &GlobalArgs, command: ClaudeCodeCommand) -> Result<ExitCode> {
    match command {
        ClaudeCodeCommand::Settings(args) => settings(global, &args),
        ClaudeCodeCommand::Shell(args) => shell::shell(global, args),
        ClaudeCodeCommand::Hook(args) => hook::hook(global, &args),
    }
}

fn settings(global: &GlobalArgs, args: &SettingsArgs) -> Result<ExitCode> {
    let airlock = this_binary()?;
    let target = args.target.resolved()?;
    // Named in the settings whatever the environment Claude Code will start in.
    let state_dir = std::path::absolute(crate::run::state_dir(global)?)
        .context("cannot make the state directory's path absolute")?;
    let settings = settings_json(&airlock, &state_dir, &target, &args.allow_tools)?;
    crate::shown::out!("{}", serde_json::to_string_pretty(&settings)?);
    Ok(ExitCode::SUCCESS)
}

/// The CLAUDE_CODE_SHELL_PREFIX the settings of this binary, state directory and target name.
fn expected_prefix(state_dir: &Path, target: &Target) -> Result<String> {
    let state_dir = std::path::absolute(state_dir)
        .context("cannot make the state directory's path absolute")?;
    shell_prefix(text(&this_binary()?)?, &state_dir, target)
}

/// A word of CLAUDE_CODE_SHELL_PREFIX after its program: single-quoted when it needs it. A word
/// with a quote of its own, or that holds " -" (where Claude Code would cut the prefix), is
/// refused rather than trusted to an escape.
fn prefix_word(word: &str) -> Result<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._+-=:,@".contains(c);
    if word.contains('\'') || word.contains(" -") {
        bail!("{word:?} cannot go into CLAUDE_CODE_SHELL_PREFIX safely (no single quote, no \" -\" in it): use another path or name");
    }
    if !word.is_empty() && word.chars().all(plain) {
        return Ok(word.to_string());
    }
    Ok(format!("'{word}'"))
}

/// CLAUDE_CODE_SHELL_PREFIX. Claude Code 2.1.328 does not split it into words as a shell would:
/// it cuts it at its last " -", quotes what comes before as the program (so a program written
/// `airlock claude-code shell` is looked for as one file of that name) and leaves the rest to
/// the shell as it is; without a " -", all of it is the program. So the prefix is the binary's
/// path, bare (it must need no quoting), then one option, --state-dir=DIR, then only words
/// without " -": `claude-code shell WORKSPACE PROFILE`.
fn shell_prefix(airlock: &str, state_dir: &Path, target: &Target) -> Result<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._+-".contains(c);
    if !airlock.starts_with('/') || !airlock.chars().all(plain) {
        bail!("the airlock binary's path {airlock:?} cannot go into CLAUDE_CODE_SHELL_PREFIX (it must be absolute, of letters, digits and / . _ + - only): install airlock elsewhere");
    }
    let profile = target.profile.as_deref().unwrap_or("default");
    Ok(format!(
        "{airlock} {} claude-code shell {} {}",
        prefix_word(&format!("--state-dir={}", text(state_dir)?))?,
        prefix_word(text(&target.workspace)?)?,
        prefix_word(profile)?
    ))
}

fn settings_json(
    airlock: &Path,
    state_dir: &Path,
    target: &Target,
    allow_tools: &[String],
) -> Result<serde_json::Value> {
    let binary = text(airlock)?;
    let prefix = shell_prefix(binary, state_dir, target)?;
    let hook = |event: &str| -> Result<serde_json::Value> {
        let mut args = vec![
            format!("--state-dir={}", text(state_dir)?),
            "claude-code".into(),
            "hook".into(),
            event.into(),
            "--workspace".into(),
            text(&target.workspace)?.to_string(),
        ];
        if let Some(profile) = &target.profile {
            args.extend(["--profile".to_string(), profile.clone()]);
        }
        for tool in allow_tools {
            args.extend(["--allow-tool".to_string(), tool.clone()]);
        }
        // The exec form (command + args) runs the hook directly: 2.1.328 wraps neither it in
        // the shell prefix (it does a plain command hook's) nor in sh -c.
        Ok(
            json!([{ "matcher": "*", "hooks": [{ "type": "command", "command": binary, "args": args }] }]),
        )
    };
    Ok(json!({
        "env": { "CLAUDE_CODE_SHELL_PREFIX": prefix },
        "permissions": { "deny": FILE_TOOLS },
        "hooks": {
            "SessionStart": hook("session-start")?,
            "PreToolUse": hook("pre-tool-use")?,
            "SessionEnd": hook("session-end")?,
        },
    }))
}

/// The airlock session of Claude Code session `claude_session`: `claude-<its id>`.
fn session_name(claude_session: &str) -> Result<String> {
    crate::agent::session_name("claude", "Claude Code", claude_session)
}

/// The session of this Claude Code session, made on first use (see [`crate::agent::attach`]).
fn attach(caller: &Caller, target: &Target, claude_session: &str) -> Result<String> {
    crate::agent::attach(
        caller,
        target,
        &session_name(claude_session)?,
        "Claude Code",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_the_binary_by_its_path_deny_the_file_tools_and_carry_the_target() {
        let target = Target {
            workspace: "/src/my app".into(),
            profile: Some("ci".into()),
        };
        let value =
            settings_json(Path::new("/opt/airlock"), Path::new("/st"), &target, &[]).unwrap();
        assert_eq!(
            value["env"]["CLAUDE_CODE_SHELL_PREFIX"],
            "/opt/airlock --state-dir=/st claude-code shell '/src/my app' ci"
        );
        assert_eq!(value["permissions"]["deny"], json!(FILE_TOOLS));
        let start = &value["hooks"]["SessionStart"][0]["hooks"][0];
        assert_eq!(start["command"], "/opt/airlock");
        assert_eq!(start["args"][3], "session-start");
        assert_eq!(start["args"][5], "/src/my app");
        assert_eq!(start["args"][7], "ci");
        assert_eq!(
            value["hooks"]["PreToolUse"][0]["hooks"][0]["args"][3],
            "pre-tool-use"
        );
    }

    #[test]
    fn a_prefix_claude_code_would_cut_wrongly_is_refused() {
        let at = |workspace: &str| Target {
            workspace: workspace.into(),
            profile: None,
        };
        let st = Path::new("/st");
        assert!(settings_json(Path::new("/opt/airlock"), st, &at("/src/it's"), &[]).is_err());
        assert!(settings_json(Path::new("/opt/airlock"), st, &at("/src/app -x"), &[]).is_err());
        assert!(settings_json(Path::new("/opt/air lock"), st, &at("/src/app"), &[]).is_err());
        let value = settings_json(Path::new("/opt/airlock"), st, &at("/src/app"), &[]).unwrap();
        assert_eq!(
            value["env"]["CLAUDE_CODE_SHELL_PREFIX"],
            "/opt/airlock --state-dir=/st claude-code shell /src/app default"
        );
    }
}
