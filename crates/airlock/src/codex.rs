//! `airlock codex`: Codex's shell commands run in the workspace's airlock session, and a
//! command that does not get there runs in Codex's own read-only sandbox, never on the host.
//!
//! `settings` prints a Codex config layer (`~/.codex/airlock.config.toml`, for `codex -p
//! airlock`): a PreToolUse hook (`airlock codex hook pre-tool-use`) rewrites each shell command
//! into `airlock codex shell … COMMAND`, which runs it with `airlock run` in the Codex
//! session's airlock session, or denies it when core would refuse its run; Codex's sandbox
//! stays read-only. `rules` prints the Codex rule that lets exactly that airlock invocation
//! out of Codex's sandbox (airlock cannot make its namespaces inside it). Codex skips a hook
//! that is missing, failing or not trusted and runs the command anyway: then it runs read-only,
//! offline, in Codex's sandbox. docs/codex.md has the why and what Codex 0.171.0 was seen to do.

mod hook;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};

use crate::agent::{attach, session_name, text, this_binary, Target};
use crate::cli::GlobalArgs;
use crate::run::caller;

#[derive(Debug, Subcommand)]
pub enum CodexCommand {
    /// Print the Codex config that runs every shell command of Codex in an airlock session
    #[command(
        long_about = "Print a Codex config layer that makes every shell command of \
        Codex run inside the workspace's airlock session: save it as \
        ~/.codex/airlock.config.toml and start Codex with 'codex -p airlock' (or 'codex exec -p \
        airlock'), with the rule 'airlock codex rules' prints in ~/.codex/rules/airlock.rules.\n\n\
        Each Codex session gets an airlock session of its own, named codex-<its id>: its changes \
        reach DIR only through 'airlock diff' and 'airlock apply'. A PreToolUse hook rewrites each \
        command into airlock's, or refuses it when airlock would (disabled, killed, applied); \
        apply_patch is refused (it would write the host's files). Codex's own sandbox stays \
        read-only: a command the hook did not rewrite (airlock missing, the hook not trusted yet) \
        cannot write or reach the network. See docs/codex.md."
    )]
    Settings(Target),
    /// Print the Codex rule that lets airlock's own command out of Codex's sandbox
    Rules(Target),
    /// Run one Codex shell command in the session (what the hook rewrites commands into)
    #[command(hide = true)]
    Shell(ShellArgs),
    /// Answer one Codex hook (SessionStart, PreToolUse)
    #[command(hide = true)]
    Hook(HookArgs),
}

/// Positional: the rule lets out exactly the invocations that begin with these words.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// The workspace
    pub workspace: PathBuf,
    /// The profile, by name
    pub profile: String,
    /// Codex's session id
    pub codex_session: String,
    /// The command, for /bin/bash -c
    #[arg(allow_hyphen_values = true)]
    pub command: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookEvent {
    SessionStart,
    PreToolUse,
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// Which hook Codex runs
    #[arg(value_enum)]
    pub event: HookEvent,
    #[command(flatten)]
    pub target: Target,
}

pub fn dispatch(global: &GlobalArgs, command: CodexCommand) -> Result<ExitCode> {
    match command {
        CodexCommand::Settings(target) => print_with(global, &target, settings_toml),
        CodexCommand::Rules(target) => print_with(global, &target, rules_file),
        CodexCommand::Shell(args) => shell(global, args),
        CodexCommand::Hook(args) => hook::hook(global, &args),
    }
}

/// What every printed or rewritten invocation names: this binary, the state directory as it is
/// now (not as Codex's environment will have it), the workspace and the profile.
struct Invocation {
    airlock: PathBuf,
    state_dir: PathBuf,
    workspace: PathBuf,
    profile: String,
}

impl Invocation {
    fn new(global: &GlobalArgs, target: &Target) -> Result<Self> {
        let state_dir = std::path::absolute(crate::run::state_dir(global)?)
            .context("cannot make the state directory's path absolute")?;
        Ok(Self {
            airlock: this_binary()?,
            state_dir,
            workspace: target.workspace.clone(),
            profile: target.profile.clone().unwrap_or_else(|| "default".into()),
        })
    }

    /// `airlock --state-dir=… codex shell WORKSPACE PROFILE`: the words the rule matches.
    fn shell_prefix(&self) -> Result<Vec<String>> {
        Ok(vec![
            text(&self.airlock)?.to_string(),
            format!("--state-dir={}", text(&self.state_dir)?),
            "codex".into(),
            "shell".into(),
            text(&self.workspace)?.to_string(),
            self.profile.clone(),
        ])
    }

    /// The shell command Codex runs instead of `command`.
    fn rewritten(&self, codex_session: &str, command: &str) -> Result<String> {
        let mut words = self.shell_prefix()?;
        words.extend([codex_session.to_string(), command.to_string()]);
        Ok(shell_words(&words))
    }

    /// The hook's command line (Codex runs it with a shell). When airlock cannot answer (its
    /// binary gone, a crash), exit 2 with a reason: the one failure Codex does not ignore.
    fn hook_command(&self, event: &str, block_on_failure: bool) -> Result<String> {
        let words = [
            text(&self.airlock)?,
            &format!("--state-dir={}", text(&self.state_dir)?),
            "codex",
            "hook",
            event,
            "--workspace",
            text(&self.workspace)?,
            "--profile",
            &self.profile,
        ]
        .map(str::to_string);
        let command = shell_words(&words);
        if !block_on_failure {
            return Ok(command);
        }
        Ok(format!(
            "{command} || {{ echo \"airlock's hook failed (status $?): the command was refused; is {} still there? run 'airlock check'\" >&2; exit 2; }}",
            text(&self.airlock)?
        ))
    }
}

fn print_with(
    global: &GlobalArgs,
    target: &Target,
    render: fn(&Invocation) -> Result<String>,
) -> Result<ExitCode> {
    let invocation = Invocation::new(global, &target.resolved()?)?;
    crate::shown::out!(text: render(&invocation)?);
    Ok(ExitCode::SUCCESS)
}

/// A TOML (and JSON, and Starlark) string literal.
fn quoted(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// The Codex config layer: its settings made by a TOML serializer, and the comments above them
/// naming the workspace and profile as quoted strings (a directory name holding a newline and a
/// `[mcp_servers.x]` line must stay a name, not become a table of the user's Codex config).
fn settings_toml(at: &Invocation) -> Result<String> {
    let workspace = text(&at.workspace)?;
    let hook = |event: &str, block_on_failure: bool| -> Result<toml::Value> {
        let command = at.hook_command(event, block_on_failure)?;
        Ok(toml::Value::Array(vec![toml::Value::Table(
            toml::Table::from_iter([(
                "hooks".to_string(),
                toml::Value::Array(vec![toml::Value::Table(toml::Table::from_iter([
                    ("type".to_string(), toml::Value::from("command")),
                    ("command".to_string(), toml::Value::from(command)),
                ]))]),
            )]),
        )]))
    };
    let settings = toml::Table::from_iter([
        ("sandbox_mode".to_string(), toml::Value::from("read-only")),
        (
            "hooks".to_string(),
            toml::Value::Table(toml::Table::from_iter([
                ("SessionStart".to_string(), hook("session-start", false)?),
                ("PreToolUse".to_string(), hook("pre-tool-use", true)?),
            ])),
        ),
    ]);
    let body = toml::to_string(&settings).context("cannot write Codex's settings as TOML")?;
    Ok(format!(
        "# airlock: every shell command of Codex runs in an airlock session over the workspace
# {workspace} (profile {profile}). Save as ~/.codex/airlock.config.toml, run Codex with
# 'codex -p airlock', and put what 'airlock codex rules' prints in
# ~/.codex/rules/airlock.rules. See docs/codex.md.
#
# Codex's own sandbox stays on (sandbox_mode): a command the hook did not rewrite (the hook not
# trusted yet, airlock's binary gone) runs in it, unable to write or to reach the network. The
# rule lets airlock's own command out of it: airlock cannot build its sandbox inside Codex's.
# SessionStart starts the airlock session; PreToolUse rewrites each shell command into
# airlock's, or denies it (and apply_patch) with the reason.

{body}",
        workspace = quoted(workspace),
        profile = quoted(&at.profile),
    ))
}

fn rules_file(at: &Invocation) -> Result<String> {
    let pattern: Vec<String> = at.shell_prefix()?.iter().map(|w| quoted(w)).collect();
    Ok(format!(
        "# airlock: lets airlock's own shell command, and only it, out of Codex's sandbox, where
# airlock could not build its own. Save as ~/.codex/rules/airlock.rules. See docs/codex.md.
prefix_rule(
    pattern = [{}],
    decision = \"allow\",
    justification = \"the command runs in airlock's sandbox, in the session's copy-on-write layer\",
)
",
        pattern.join(", ")
    ))
}

/// Words for a POSIX shell: bare when plain, else single-quoted (a quote as '"'"').
fn shell_words(words: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._+-=:,@%".contains(c);
    words
        .iter()
        .map(|word| {
            if !word.is_empty() && word.chars().all(plain) {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', "'\"'\"'"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The session of this Codex session, made on first use (see [`crate::agent::attach`]).
fn attach_codex(global: &GlobalArgs, target: &Target, codex_session: &str) -> Result<String> {
    let name = session_name("codex", "Codex", codex_session)?;
    attach(&caller(global), target, &name, "Codex")
}

/// Refuse `codex shell` called in any other shape than the hook's rewrite: `airlock
/// [--state-dir=DIR] codex shell WORKSPACE PROFILE ID COMMAND`, nothing before, between or after.
/// The rule lets out of Codex's sandbox whatever begins with the rule's six words, and the
/// agent can write that itself (the hook not trusted, or skipped): a global option after them
/// (`--state-dir=/tmp/x`) would parse, and put its run under another state directory, past
/// this one's kill switch, audit log and `airlock kill`.
fn exactly_as_rewritten(argv: &[OsString], args: &ShellArgs) -> Result<()> {
    let expected: [&OsStr; 6] = [
        "codex".as_ref(),
        "shell".as_ref(),
        args.workspace.as_os_str(),
        args.profile.as_ref(),
        args.codex_session.as_ref(),
        args.command.as_ref(),
    ];
    let words = argv.get(1..).unwrap_or_default();
    let (before, tail) = words.split_at(words.len().saturating_sub(expected.len()));
    let tail_ok = tail.iter().map(OsString::as_os_str).eq(expected);
    let before_ok = match before {
        [] => true,
        [state_dir] => state_dir.as_encoded_bytes().starts_with(b"--state-dir="),
        _ => false,
    };
    if !(tail_ok && before_ok) {
        bail!(
            "'airlock codex shell' takes exactly: airlock [--state-dir=DIR] codex shell WORKSPACE PROFILE SESSION-ID COMMAND, as airlock's Codex hook writes it (no other option, no '--'); got {argv:?}: nothing was run"
        );
    }
    Ok(())
}

/// `airlock run --session SESSION --profile P -- /bin/bash -c COMMAND` by this same binary, in place of
/// this process. Never a fallback: if the session cannot be had or the run is refused, the
/// command does not run.
fn shell(global: &GlobalArgs, args: ShellArgs) -> Result<ExitCode> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    exactly_as_rewritten(&argv, &args)?;
    let target = Target {
        workspace: args.workspace,
        profile: Some(args.profile),
    };
    let session = attach_codex(global, &target, &args.codex_session)?;
    let airlock = this_binary()?;
    let mut command = Command::new(&airlock);
    if let Some(state_dir) = &global.state_dir {
        command.arg("--state-dir").arg(state_dir);
    }
    // Here, as the hook is: not a server AIRLOCK_URL may name in Codex's environment.
    let err = command
        .env_remove("AIRLOCK_URL")
        .args(crate::agent::run_args(
            &target,
            &session,
            args.command.as_ref(),
        ))
        .exec();
    Err(err).with_context(|| format!("cannot start {} run: nothing was run", airlock.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(workspace: &str) -> Invocation {
        Invocation {
            airlock: "/opt/airlock".into(),
            state_dir: "/st".into(),
            workspace: workspace.into(),
            profile: "ci".into(),
        }
    }

    #[test]
    fn the_rewrite_starts_with_the_rules_words_and_quotes_the_command() {
        let rewritten = at("/src/my app")
            .rewritten("01a2-b3", "echo 'it''s' > f; ls")
            .unwrap();
        assert_eq!(
            rewritten,
            "/opt/airlock --state-dir=/st codex shell '/src/my app' ci 01a2-b3 'echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"' > f; ls'"
        );
        let rules = rules_file(&at("/src/my app")).unwrap();
        assert!(rules.contains(
            r#"pattern = ["/opt/airlock", "--state-dir=/st", "codex", "shell", "/src/my app", "ci"]"#
        ));
    }

    /// `words` (split at spaces, then `last` appended whole) parsed as clap does, and whether
    /// `codex shell` would take them; the state directory clap took.
    fn shell_takes(words: &str, last: &str) -> (Option<PathBuf>, bool) {
        use clap::Parser as _;
        let argv: Vec<&str> = words.split(' ').chain([last]).collect();
        let cli = crate::cli::Cli::try_parse_from(&argv).unwrap();
        let crate::cli::Command::Codex(CodexCommand::Shell(args)) = cli.command else {
            panic!("not codex shell: {argv:?}");
        };
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        (
            cli.global.state_dir,
            exactly_as_rewritten(&argv, &args).is_ok(),
        )
    }

    #[test]
    fn codex_shell_runs_only_in_the_shape_the_hook_writes() {
        let hook = "/opt/airlock --state-dir=/st codex shell /ws default 01a2-b3";
        assert_eq!(
            shell_takes(hook, "echo --state-dir=/x; id"),
            (Some("/st".into()), true)
        );
        assert_eq!(
            shell_takes("/opt/airlock codex shell /ws default 01a2-b3", "id"),
            (None, true)
        );
        // What the rule's prefix lets out, written by the agent with a global option after it:
        // clap takes it, and the run would go to another state directory (another kill switch,
        // another audit log).
        assert_eq!(
            shell_takes(&format!("{hook} --state-dir=/tmp/mine"), "id"),
            (Some("/tmp/mine".into()), false)
        );
        for odd in [
            "/opt/airlock --state-dir=/st codex shell /ws default -- 01a2-b3",
            "/opt/airlock --state-dir=/st codex shell --state-dir=/tmp/mine /ws default 01a2-b3",
            "/opt/airlock --state-dir /st codex shell /ws default 01a2-b3",
        ] {
            assert!(!shell_takes(odd, "id").1, "{odd}");
        }
    }

    #[test]
    fn the_pre_tool_use_hook_blocks_when_airlock_cannot_answer() {
        let settings = settings_toml(&at("/src/app")).unwrap();
        let parsed: toml::Table = toml::from_str(&settings).unwrap();
        assert_eq!(parsed["sandbox_mode"].as_str(), Some("read-only"));
        let pre = at("/src/app").hook_command("pre-tool-use", true).unwrap();
        assert!(pre.starts_with("/opt/airlock --state-dir=/st codex hook pre-tool-use --workspace /src/app --profile ci || {"));
        assert!(pre.ends_with("exit 2; }"));
        let hooks = &parsed["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(hooks["command"].as_str(), Some(pre.as_str()));
        assert_eq!(hooks["type"].as_str(), Some("command"));
    }

    #[test]
    fn a_workspace_name_cannot_write_codex_settings_of_its_own() {
        // A directory name with newlines, a table header and a quote: the settings written for it
        // are the same settings, with the name a string wherever it appears.
        let name = "/src/x\n[mcp_servers.x]\ncommand = \"sh\"\n# \"\n";
        let settings = settings_toml(&at(name)).unwrap();
        let parsed: toml::Table =
            toml::from_str(&settings).unwrap_or_else(|e| panic!("{e}\n{settings}"));
        let keys: Vec<&String> = parsed.keys().collect();
        assert_eq!(keys, ["hooks", "sandbox_mode"], "{settings}");
        let start = parsed["hooks"]["SessionStart"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert!(
            start.contains("[mcp_servers.x]"),
            "the name is in the command, quoted: {start}"
        );
    }
}
