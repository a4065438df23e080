//! The airlock command line: parse, call the core, print, exit with a code that means something.
#![forbid(unsafe_code)]

mod check;
mod cli;
mod diff;
mod run;
mod session;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, SessionCommand};

/// airlock's own failure: bad input, a refused run, a sandbox that could not be built.
pub const EXIT_AIRLOCK_ERROR: u8 = 125;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
    let result = match cli.command {
        Command::Run(args) => run::run(&cli.global, args),
        Command::Check(args) => check::check(&cli.global, args),
        Command::Session(SessionCommand::New(args)) => session::new(&cli.global, args),
        Command::Sessions(args) => session::list(&cli.global, args),
        Command::Diff(args) => diff::diff(&cli.global, args),
        Command::Discard(args) => session::discard(&cli.global, args),
        Command::Gc(args) => session::gc(&cli.global, args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("airlock: error: {err:#}");
            ExitCode::from(EXIT_AIRLOCK_ERROR)
        }
    }
}
