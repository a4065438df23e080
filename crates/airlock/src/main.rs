//! The airlock command line: parse, call the core, print, exit with a code that means something.
#![forbid(unsafe_code)]

use crate::shown::note;

mod agent;
mod apply;
mod approvals;
mod check;
mod claude_code;
mod cli;
mod codex;
mod completion;
mod control;
mod diff;
mod k8s;
mod learn;
mod log;
mod policy;
mod progress;
mod remote;
mod replay;
mod run;
mod serve;
mod session;
mod shown;

use std::process::ExitCode;

use cli::{Cli, Command, SessionCommand};

/// airlock's own failure: bad input, a refused run, a sandbox that could not be built.
pub const EXIT_AIRLOCK_ERROR: u8 = 125;

/// `apply --reviewed`: the session changed since the diff reviewed; nothing was written.
pub const EXIT_REVIEW_STALE: u8 = 3;

/// Core's stable code of a failure (here, or the server's), if it has one.
fn core_code(err: &anyhow::Error) -> Option<&str> {
    if let Some(core) = err.downcast_ref::<airlock_core::Error>() {
        return Some(core.code().0);
    }
    err.downcast_ref::<airlock_core::Refusal>()
        .map(|refusal| refusal.code.as_str())
}

fn main() -> ExitCode {
    // scripts/build.sh links airlock statically: glibc must then load no NSS library (see
    // airlock_jail::nss).
    if cfg!(target_feature = "crt-static") {
        airlock_jail::nss::use_built_in_services_only();
    }
    // A run for `airlock serve`, in a process of its own (see airlock_runner::job).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "__serve-worker")
    {
        return airlock_runner::worker::main();
    }
    let cli = match Cli::from_args() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are not errors; a bad argument is airlock's failure (125), never
            // to be confused with an exit status of the command.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(EXIT_AIRLOCK_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // With --json, a failure is JSON on stdout too (scripts read stdout), besides the message.
    let json = match &cli.command {
        Command::Check(a) => a.json,
        Command::Run(a) => a.json,
        Command::Session(SessionCommand::New(a)) => a.json,
        Command::Sessions(a) => a.json,
        Command::Diff(a) => a.json,
        Command::Apply(a) => a.json,
        Command::Revert(a) => a.json,
        Command::Log(a) => a.json,
        Command::Kill(a) | Command::Pause(a) | Command::Resume(a) => a.json,
        Command::Disable(a) => a.json,
        Command::Status(a) => a.json,
        Command::Approvals(a) => a.json,
        Command::Approve(a) => a.json,
        Command::Deny(a) => a.json,
        Command::Gc(a) => a.json,
        Command::Discard(a) => a.json,
        Command::Enable(a) => a.json,
        Command::Review(a) => a.json,
        Command::Token(cli::TokenCommand::Create(a)) => a.json,
        Command::Token(cli::TokenCommand::List(a)) => a.json,
        Command::Token(cli::TokenCommand::Revoke(a)) => a.json,
        Command::Policy(cli::PolicyCommand::Show(a)) => a.json,
        Command::Policy(cli::PolicyCommand::Check(a)) => a.json,
        Command::Policy(cli::PolicyCommand::Replay(a)) => a.json,
        Command::Policy(cli::PolicyCommand::List(a)) => a.json,
        Command::ClaudeCode(claude_code::ClaudeCodeCommand::Settings(a)) => a.json,
        Command::K8s(cli::K8sCommand::Render(a)) => a.json,
        _ => false,
    };
    let remote = match remote::from_args(cli.global.server.as_deref(), &cli.command) {
        Ok(remote) => remote,
        Err(err) => {
            note!("airlock: error: {}", message(&err));
            return ExitCode::from(EXIT_AIRLOCK_ERROR);
        }
    };
    // What is about this machine (its kernel, its server, its tokens, its manual) is answered
    // here even when a server is named: from_args names none for it.
    let result = match (cli.command, remote) {
        (command, Some(remote)) => remote::dispatch(&remote, command),
        (command, None) => local(&cli.global, command),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            note!("airlock: error: {}", message(&err));
            let code = core_code(&err);
            // A review gone stale is no failure of airlock's: the person reads the diff again.
            let status = match code {
                Some("review_stale") => EXIT_REVIEW_STALE,
                _ => EXIT_AIRLOCK_ERROR,
            };
            if json {
                let mut failure =
                    serde_json::json!({ "error": message(&err), "exit_status": status });
                // Core's stable name for it, the same the API answers with, for scripts to
                // branch on; none for a failure of this front end's own (an argument).
                if let Some(code) = code {
                    failure["code"] = code.into();
                }
                crate::shown::out!("{failure}");
            }
            ExitCode::from(status)
        }
    }
}

/// The command, carried out by this process's core.
fn local(global: &cli::GlobalArgs, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => run::run(global, args),
        Command::Learn(args) => learn::learn(global, args),
        Command::Check(args) => check::check(global, args),
        Command::Policy(cli::PolicyCommand::Show(args)) => policy::show(global, args),
        Command::Policy(cli::PolicyCommand::Check(args)) => policy::check(args),
        Command::Policy(cli::PolicyCommand::Replay(args)) => replay::replay(global, args),
        Command::Policy(cli::PolicyCommand::List(args)) => policy::list(global, args),
        Command::Session(SessionCommand::New(args)) => session::new(global, args),
        Command::Sessions(args) => session::list(global, args),
        Command::Diff(args) => diff::diff(global, args),
        Command::Apply(args) => apply::apply(global, args),
        Command::Revert(args) => apply::revert(global, args),
        Command::Discard(args) => session::discard(global, args),
        Command::Gc(args) => session::gc(global, args),
        Command::Log(args) => log::log(global, args),
        Command::Kill(args) => control::act(global, args, airlock_core::control::Action::Kill),
        Command::Pause(args) => control::act(global, args, airlock_core::control::Action::Pause),
        Command::Resume(args) => control::act(global, args, airlock_core::control::Action::Resume),
        Command::Disable(args) => control::disable(global, args),
        Command::Enable(args) => control::enable(global, args),
        Command::Status(args) => control::status(global, args),
        Command::Approvals(args) => approvals::list(global, args),
        Command::Approve(args) => approvals::approve(global, args),
        Command::Deny(args) => approvals::deny(global, args),
        Command::Man(args) => man(&args.dir),
        Command::Completions(args) => completions(args.shell),
        Command::Complete(args) => {
            let what = match args.what {
                cli::CompleteWhat::Sessions => airlock_core::NameKind::Sessions,
                cli::CompleteWhat::Profiles => airlock_core::NameKind::Profiles,
            };
            for name in airlock_core::names_for_completion(&run::caller(global), what) {
                crate::shown::out!("{name}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(args) => serve::serve(global, args),
        Command::Mcp(args) => serve::mcp(global, args),
        Command::Review(args) => serve::review(global, args),
        Command::Token(command) => serve::token(global, command),
        Command::ClaudeCode(command) => claude_code::dispatch(global, command),
        Command::Codex(command) => codex::dispatch(global, command),
        Command::K8s(cli::K8sCommand::Render(args)) => k8s::render(global, args),
    }
}

/// `airlock man DIR`: a page for airlock and one per command (airlock-session-new.1 …).
fn man(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use clap::CommandFactory as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pending = vec![(String::from("airlock"), Cli::command())];
    let mut written = 0;
    while let Some((name, command)) = pending.pop() {
        let command = command
            .display_name(name.clone())
            .bin_name(name.replace('-', " "));
        for sub in command.get_subcommands() {
            if sub.get_name() != "help" {
                pending.push((format!("{name}-{}", sub.get_name()), sub.clone()));
            }
        }
        let path = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut page)
            .with_context(|| format!("cannot render {name}.1"))?;
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    note!(
        "airlock: wrote {written} manual pages into {}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `airlock completions SHELL`: the shell's completion script, on stdout.
fn completions(shell: cli::CompletionShell) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use clap::CommandFactory as _;
    use std::io::Write as _;
    let mut script = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::from(shell),
        &mut Cli::command(),
        "airlock",
        &mut script,
    );
    let script = completion::with_names(shell, String::from_utf8_lossy(&script).into_owned());
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(script.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the completion script to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The error and its causes, each cause only if the message so far does not already say it (most
/// of airlock's errors quote their cause).
fn message(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
