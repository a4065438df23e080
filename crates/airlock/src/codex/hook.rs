//! `airlock codex hook EVENT`: Codex's SessionStart and PreToolUse hooks.
//!
//! Codex (0.171.0) gives the hook a JSON object on stdin, e.g. for a shell command:
//!
//! ```text
//! {"session_id":"01a2…","turn_id":"…","transcript_path":"…","cwd":"/src/app",
//!  "hook_event_name":"PreToolUse","model":"…","permission_mode":"bypassPermissions",
//!  "tool_name":"Bash","tool_input":{"command":"id -u; echo hi > made.txt"},"tool_use_id":"call_0"}
//! ```
//!
//! and reads its answer from stdout. A rewrite must say "allow" with the `updatedInput`; a
//! "deny" blocks with its reason, and so does exit 2 with a reason on stderr. Any other failure
//! (another exit status, output it cannot read, a hook it cannot start or that is not trusted)
//! Codex ignores, and runs the command as it was: hence the settings' `|| exit 2` and Codex's
//! read-only sandbox under everything.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use serde_json::{json, Value};

use super::{attach_codex, HookArgs, HookEvent, Invocation};
use crate::cli::GlobalArgs;

/// Codex's "block this tool call" exit status (with the reason on stderr).
const EXIT_BLOCK: u8 = 2;

/// Tools that write the host's files themselves, outside the session.
const FILE_TOOLS: [&str; 3] = ["apply_patch", "Edit", "Write"];

pub fn hook(global: &GlobalArgs, args: &HookArgs) -> Result<ExitCode> {
    let input = match crate::agent::read_hook_input() {
        Ok(input) => input,
        Err(err) => {
            eprintln!("airlock: cannot read the hook's input from Codex ({err:#}); refused");
            return Ok(ExitCode::from(EXIT_BLOCK));
        }
    };
    let target = args.target.resolved()?;
    let answer = match args.event {
        HookEvent::SessionStart => session_start(global, &target, &input),
        HookEvent::PreToolUse => pre_tool_use(global, &target, &input),
    };
    if let Some(answer) = answer {
        println!("{answer}");
    }
    Ok(ExitCode::SUCCESS)
}

fn session_id(input: &Value) -> Result<&str> {
    input["session_id"]
        .as_str()
        .context("the hook's input has no \"session_id\"")
}

/// Attach (make) the session now, and tell the agent where its commands run. A refusal here is
/// said to the agent; each command is refused again by PreToolUse and by `airlock codex shell`.
fn session_start(
    global: &GlobalArgs,
    target: &crate::agent::Target,
    input: &Value,
) -> Option<Value> {
    let context = match session_id(input).and_then(|id| attach_codex(global, target, id)) {
        Ok(session) => format!(
            "Your shell commands run inside the airlock sandbox, in airlock session {session} over {}: \
             a copy-on-write layer, so your changes do not reach the real workspace until a person \
             reviews them ('airlock diff {session}') and applies them ('airlock apply {session}'). \
             apply_patch is disabled (it would bypass the session): edit files with shell commands \
             (sed, a heredoc).",
            target.workspace.display()
        ),
        Err(err) => format!(
            "airlock refused to start a session for this workspace, so every shell command will be \
             refused until that is fixed: {err:#}"
        ),
    };
    Some(json!({
        "hookSpecificOutput": { "hookEventName": "SessionStart", "additionalContext": context }
    }))
}

/// A shell command: rewritten into airlock's, or denied with core's reason. A file tool:
/// denied. Anything else: no opinion.
fn pre_tool_use(
    global: &GlobalArgs,
    target: &crate::agent::Target,
    input: &Value,
) -> Option<Value> {
    let deny = |reason: String| {
        json!({ "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }})
    };
    match input["tool_name"].as_str() {
        Some("Bash") => Some(match rewrite(global, target, input) {
            Ok(command) => json!({ "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "updatedInput": { "command": command },
            }}),
            Err(err) => deny(format!(
                "airlock refused to run this command (it did not run): {err:#}"
            )),
        }),
        Some(tool) if FILE_TOOLS.contains(&tool) => Some(deny(format!(
            "{tool} is disabled under airlock: it would write the host's files, outside the airlock \
             session. Edit with shell commands instead (sed, a heredoc): they run in the session."
        ))),
        Some(_) => None,
        None => Some(deny(
            "airlock: the hook's input names no tool; refused".into(),
        )),
    }
}

/// The command as `airlock codex shell` will run it, once core has said it may run there.
fn rewrite(global: &GlobalArgs, target: &crate::agent::Target, input: &Value) -> Result<String> {
    let codex_session = session_id(input)?;
    let session = attach_codex(global, target, codex_session)?;
    let command = input["tool_input"]["command"]
        .as_str()
        .context("the shell call has no command")?;
    crate::agent::check_command(&crate::run::caller(global), target, &session, command)?;
    Invocation::new(global, target)?.rewritten(codex_session, command)
}
