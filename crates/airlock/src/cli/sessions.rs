//! The arguments of sessions and their changes: `session new`, `sessions`, `diff`, `apply`,
//! `revert`, `discard`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Start a session and print its id
    #[command(
        long_about = "Start a session over a workspace and print its id. Nothing is copied: the \
            session is a copy-on-write layer, as cheap for a huge workspace as for an empty one. \
            Run commands in it with 'airlock run --session ID -- CMD'; each run sees the changes \
            of the runs before it, runs take turns, and the host workspace is not touched until \
            you apply the changes.",
        after_help = "Example:\n  id=$(airlock session new -p ci-bot -w ~/src/app --name fix)\n  \
            airlock run --session \"$id\" -- make test\n  airlock diff \"$id\"\n\n\
            Exit status: 0 the id was printed; 125 airlock refused (a workspace no session may \
            have, a bad profile, a taken name, a switch set with 'airlock disable') or failed."
    )]
    New(SessionNewArgs),
}

/// Which profile and which workspace: `run` and `session new` take the same options.
#[derive(Debug, Args)]
pub struct ProfileAndWorkspace {
    /// Profile to apply, by name [default: default]
    #[arg(short, long, value_name = "NAME", conflicts_with = "profile_file")]
    pub profile: Option<String>,
    /// Profile to apply, from a file (must not lie inside the workspace)
    #[arg(long, value_name = "PATH")]
    pub profile_file: Option<PathBuf>,
    /// Directory to work on [default: the current directory]
    #[arg(short, long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SessionNewArgs {
    #[command(flatten)]
    pub choice: ProfileAndWorkspace,
    /// A name to use instead of the id (letters, digits, '-', '_', '.')
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print the session's record as JSON instead of its id
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Print a JSON array instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Session id or name
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Only these paths (files or directories; relative to the workspace or absolute within it)
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Lines added and removed per file, and totals
    #[arg(long, group = "format")]
    pub stat: bool,
    /// One line per changed path: A added, M modified, D deleted, T type changed
    #[arg(long, group = "format")]
    pub name_status: bool,
    /// Every change as JSON, with modes, sizes, sha256 and hazards, the ignored trees and the
    /// digest
    #[arg(long, group = "format")]
    pub json: bool,
    /// Leave out what the repository's ignore rules hide, as 'apply --no-ignored' does (the
    /// digest shown is then one for 'apply --no-ignored --reviewed')
    #[arg(long)]
    pub no_ignored: bool,
    /// Colour the patch
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub color: ColorWhen,
    /// Never page
    #[arg(long)]
    pub no_pager: bool,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Session id or name
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Only these paths (files or directories; relative to the workspace or absolute within it)
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Say what would be written and what left out; change nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Overwrite paths the host changed since the session touched them
    #[arg(long)]
    pub force: bool,
    /// Write this hazard anyway (repeat for several)
    #[arg(long, value_name = "PATH")]
    pub allow_hazard: Vec<PathBuf>,
    /// Write every hazard that may be written at all
    #[arg(long)]
    pub allow_hazards: bool,
    /// Leave out what the repository's ignore rules hide from git status (build output,
    /// caches): 'airlock diff' lists it apart
    #[arg(long)]
    pub no_ignored: bool,
    /// Write exactly the change set whose diff showed this digest, or nothing (exit 3): it
    /// covers the whole set, also when PATHs are named
    #[arg(long, value_name = "DIGEST")]
    pub reviewed: Option<String>,
    /// Undo an interrupted apply instead of finishing it
    #[arg(long)]
    pub rollback: bool,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RevertArgs {
    /// Session id or name
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Print the outcome as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// Session id or name
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Print the result as JSON: {"session", "discarded": true}
    #[arg(long)]
    pub json: bool,
}
