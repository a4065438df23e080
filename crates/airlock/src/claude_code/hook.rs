//! `airlock claude-code hook EVENT`: Claude Code's SessionStart, PreToolUse and SessionEnd hooks.
//!
//! Claude Code gives the hook a JSON object on stdin and reads its answer from stdout. It treats
//! a hook's exit status 1 or 127 (and a hook it cannot start) as "go ahead"; only exit 2 or a
//! "deny" decision blocks. So every refusal here is a deny decision, a hook that cannot read its
//! input exits 2, and no safety rests on the hook alone: a Bash command that got past it still
//! runs only through `airlock claude-code shell`, and the file tools are denied by the
//! settings' permission rules as well.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use serde_json::{json, Value};

use airlock_core::Caller;

use super::{attach, HookArgs, HookEvent, Target, FILE_TOOLS, OTHER_FILE_TOOLS, QUIET_TOOLS};
use crate::cli::GlobalArgs;
use crate::run::caller;

/// Claude Code's "block this tool call" exit status.
const EXIT_BLOCK: u8 = 2;

pub fn hook(global: &GlobalArgs, args: &HookArgs) -> Result<ExitCode> {
    let input = match crate::agent::read_hook_input() {
        Ok(input) => input,
        Err(err) => {
            eprintln!("airlock: cannot read the hook's input from Claude Code ({err:#}); refused");
            return Ok(ExitCode::from(EXIT_BLOCK));
        }
    };
    let caller = caller(global);
    let answer = match args.event {
        HookEvent::SessionStart => session_start(&caller, &args.target, &input),
        HookEvent::PreToolUse => pre_tool_use(&caller, &args.target, &args.allow_tools, &input),
        HookEvent::SessionEnd => session_end(&caller, &args.target, &input),
    };
    if let Some(answer) = answer {
        println!("{answer}");
    }
    Ok(ExitCode::SUCCESS)
}

fn field<'a>(input: &'a Value, name: &str) -> Result<&'a str> {
    input[name]
        .as_str()
        .with_context(|| format!("the hook's input has no {name:?}"))
}

/// Attach (make) the session now, and tell the agent where its commands run. A hook of this
/// event cannot block; a refusal here is said to the agent, and each Bash call is refused again
/// by PreToolUse and by the shell prefix.
fn session_start(caller: &Caller, target: &Target, input: &Value) -> Option<Value> {
    let context = match field(input, "session_id").and_then(|id| attach(caller, target, id)) {
        Ok(session) => format!(
            "Your Bash commands run inside the airlock sandbox, in airlock session {session} over {}: \
             a copy-on-write layer, so your changes do not reach the real workspace until a person \
             reviews them ('airlock diff {session}') and applies them ('airlock apply {session}'). \
             The Read, Edit, Write, Glob and Grep tools are disabled (they would bypass the session): \
             use Bash for reading, searching and editing files (cat, grep, sed, a heredoc).",
            target.workspace.display()
        ),
        Err(err) => format!(
            "airlock refused to start a session for this workspace, so every Bash command will be \
             refused until that is fixed: {err:#}"
        ),
    };
    Some(json!({
        "hookSpecificOutput": { "hookEventName": "SessionStart", "additionalContext": context }
    }))
}

/// Deny what core would refuse to run, the file tools, and every tool the hook does not know;
/// no opinion on the rest (an "allow" here would skip Claude Code's own permission prompts).
fn pre_tool_use(
    caller: &Caller,
    target: &Target,
    allowed: &[String],
    input: &Value,
) -> Option<Value> {
    let refusal = match input["tool_name"].as_str() {
        Some("Bash") => check_bash(caller, target, input).err().map(|err| {
            format!("airlock refused to run this command (it did not run): {err:#}")
        }),
        Some(tool) if FILE_TOOLS.contains(&tool) || OTHER_FILE_TOOLS.contains(&tool) => Some(format!(
            "{tool} is disabled under airlock: it would act on the host's files, outside the airlock \
             session. Use Bash instead (cat, grep, sed, a heredoc): it runs in the airlock session."
        )),
        Some(tool) if QUIET_TOOLS.contains(&tool) || allowed.iter().any(|a| a == tool) => None,
        Some(tool) => Some(format!(
            "{tool} is denied under airlock: airlock does not know it, and it may act on the host \
             outside the airlock session (an MCP server's tool runs on the host). Use Bash, which \
             runs in the session; or, if you trust {tool}, allow it with 'airlock claude-code \
             settings --allow-tool {tool}'."
        )),
        None => Some("airlock: the hook's input names no tool; refused".to_string()),
    };
    refusal.map(|reason| {
        json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        })
    })
}

/// Whether this Bash call would run in the session, fit for it, and what core says of its run
/// there (as the shell prefix will ask for it).
fn check_bash(caller: &Caller, target: &Target, input: &Value) -> Result<()> {
    // Claude Code runs the command through the prefix its environment names: it must be this
    // one, or the command would run elsewhere (on the host, with no prefix at all).
    let expected = super::expected_prefix(&caller.state_dir()?, target)?;
    let prefix = std::env::var("CLAUDE_CODE_SHELL_PREFIX").unwrap_or_default();
    if prefix != expected {
        anyhow::bail!(
            "Claude Code's CLAUDE_CODE_SHELL_PREFIX is {prefix:?}, not airlock's {expected:?}: the command would not run in the airlock session (another settings file or the environment overrides it; use the settings 'airlock claude-code settings' prints)"
        );
    }
    if asks_for_background(&input["tool_input"]) {
        anyhow::bail!(
            "a background command would hold the airlock session, which runs one command at a time, until it ends, and every later command would wait for it: run it in the foreground (with a time limit if it may not end, e.g. 'timeout 60 ...')"
        );
    }
    let session = attach(caller, target, field(input, "session_id")?)?;
    let command = input["tool_input"]["command"]
        .as_str()
        .context("the Bash call has no command")?;
    crate::agent::check_command(caller, target, &session, command)
}

/// Whether the Bash call would run in the background. Claude Code 2.1.328 reads the parameter
/// as a "semantic boolean" (the string "true" is true), and a hook must not read it otherwise:
/// anything but absent, null, false or "false" counts as asking.
fn asks_for_background(tool_input: &Value) -> bool {
    match &tool_input["run_in_background"] {
        Value::Null | Value::Bool(false) => false,
        Value::String(word) => word != "false",
        _ => true,
    }
}

/// Say how to review; the session is left as it is. As a systemMessage (shown to the person in
/// an interactive session) and on stderr; `claude -p` 2.1.328 shows neither, so a script takes
/// the session's name from its result's session_id (docs/claude-code.md).
fn session_end(caller: &Caller, target: &Target, input: &Value) -> Option<Value> {
    let session = field(input, "session_id")
        .and_then(super::session_name)
        .ok()?;
    let summary = airlock_core::session_summary(caller, &session).ok()?;
    let changed = summary.changed_files.map_or_else(
        || "its changed files".to_string(),
        |n| crate::shown::counted(n as u64, "changed file", "changed files"),
    );
    let message = format!(
        "airlock: session {session} keeps {changed} over {} for review: \
         'airlock diff {session}', then 'airlock apply {session}' (or 'airlock discard {session}')",
        target.workspace.display()
    );
    eprintln!("{message}");
    Some(json!({ "systemMessage": message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_call_is_seen_however_claude_code_would_read_it() {
        for background in [
            json!(true),
            json!("true"),
            json!("TRUE"),
            json!(1),
            json!({}),
        ] {
            assert!(
                asks_for_background(&json!({ "command": "x", "run_in_background": background })),
                "{background}"
            );
        }
        for foreground in [json!(false), json!("false"), Value::Null] {
            assert!(
                !asks_for_background(&json!({ "command": "x", "run_in_background": foreground })),
                "{foreground}"
            );
        }
        assert!(!asks_for_background(&json!({ "command": "x" })));
    }

    #[test]
    fn a_tool_the_hook_does_not_know_is_denied_unless_allowed() {
        let state = tempfile::tempdir().unwrap();
        let caller = Caller::bare(state.path().to_path_buf(), airlock_core::Role::Operator);
        let target = Target {
            workspace: "/src/app".into(),
            profile: None,
        };
        let allowed = vec!["mcp__github__create_issue".to_string()];
        let decision = |tool: &str| {
            pre_tool_use(&caller, &target, &allowed, &json!({ "tool_name": tool }))
                .map(|answer| answer["hookSpecificOutput"]["permissionDecision"].clone())
        };
        // File tools of any version, a new tool, another MCP server's: denied.
        for denied in [
            "Read",
            "LS",
            "NotebookRead",
            "MultiEdit",
            "Frobnicate",
            "mcp__fs__write_file",
        ] {
            assert_eq!(decision(denied), Some(json!("deny")), "{denied}");
        }
        // What acts on no file and runs nothing on the host, and what a person allowed: no word.
        for quiet in [
            "TodoWrite",
            "Task",
            "ExitPlanMode",
            "AskUserQuestion",
            "mcp__github__create_issue",
        ] {
            assert_eq!(decision(quiet), None, "{quiet}");
        }
    }
}
