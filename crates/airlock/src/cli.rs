//! Arguments, and the help text that teaches how to use them.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod control;
mod service;
mod sessions;
pub use control::*;
pub use service::*;
pub use sessions::*;

/// `airlock --version`: what was built and how, for a bug report or to tell two builds apart:
/// the version, the git commit (when the build knew it: see build.rs), whether glibc is linked
/// in statically (scripts/build.sh) or loaded at start (`cargo build`, `cargo install`), and
/// whether it is a debug build (slower; it honours the test suite's AIRLOCK_TEST_* hooks).
macro_rules! version_text {
    ($linking:literal) => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("AIRLOCK_GIT_COMMIT"),
            "; ",
            $linking,
            "; ",
            env!("AIRLOCK_TARGET"),
            ")"
        )
    };
}
#[cfg(all(target_feature = "crt-static", not(debug_assertions)))]
const VERSION: &str = version_text!("statically linked; release build");
#[cfg(all(not(target_feature = "crt-static"), not(debug_assertions)))]
const VERSION: &str = version_text!("dynamically linked; release build");
#[cfg(all(target_feature = "crt-static", debug_assertions))]
const VERSION: &str = version_text!("statically linked; debug build");
#[cfg(all(not(target_feature = "crt-static"), debug_assertions))]
const VERSION: &str = version_text!("dynamically linked; debug build");

#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version = VERSION,
    about = "Run AI-agent and automation commands in a kernel-enforced sandbox.",
    long_about = "Run AI-agent and automation commands in a kernel-enforced sandbox.\n\n\
        Each command sees a minimal read-only system and your workspace through a copy-on-write \
        layer: it can read and change the workspace, but its changes never reach the host \
        directory during a run. It runs as an unprivileged user with no capabilities, no network \
        (or only the hosts a profile names, through airlock's gate), no access to your home, keys \
        or other projects, under Landlock and a seccomp filter, within memory, process, CPU, time \
        and output limits. Every action is written to an audit log first; a session's changes \
        reach the workspace only through 'airlock apply', after 'airlock diff'; 'airlock kill' \
        stops it all.",
    after_help = "Examples:\n  \
        airlock check                      what this machine can enforce\n  \
        airlock run -- make test           run in the current directory as workspace\n  \
        airlock run -p ci-bot -w ~/src/app -- ./build.sh\n  \
        airlock session new --name fix     a session: runs in it accumulate changes\n  \
        airlock run --session fix -- make  run in it\n  \
        airlock diff fix                   what it changed, as a git patch\n  \
        airlock apply fix                  write it into the workspace (revert undoes)\n  \
        airlock discard fix                drop its changes\n\n\
        Exit status of 'run': the command's own status (128+N if it was killed by signal N); \
        124 if it hit the time limit; 152 if its processes together used up the CPU time limit; \
        125 if airlock refused or failed; 126 if the command could not be executed; 127 if it was \
        not found."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The process's arguments, parsed. `airlock run` is on the path of every command an agent
    /// makes, and clap builds its whole command tree (every subcommand, every help text) before
    /// it parses: a fifth of a millisecond. So `airlock run ...` builds just `run`; anything else
    /// (and any error, `--help` too) goes through the whole tree, so that every message is the
    /// same as it would be without this shortcut.
    pub fn from_args() -> Result<Self, clap::Error> {
        use clap::FromArgMatches;
        let args: Vec<OsString> = std::env::args_os().collect();
        if Self::subcommand_is_run(&args) {
            let only_run = GlobalArgs::augment_args(clap::Command::new("airlock"))
                .subcommand_required(true)
                .subcommand(RunArgs::augment_args(clap::Command::new("run")));
            if let Ok(cli) = only_run
                .try_get_matches_from(&args)
                .and_then(|matches| Self::from_arg_matches(&matches))
            {
                return Ok(cli);
            }
        }
        Self::try_parse_from(args)
    }

    /// The first word after the global options is `run`.
    fn subcommand_is_run(args: &[OsString]) -> bool {
        let mut words = args.iter().skip(1);
        while let Some(word) = words.next() {
            if word == "--state-dir" {
                words.next();
            } else if !word.as_encoded_bytes().starts_with(b"--state-dir=") {
                return word == "run";
            }
        }
        false
    }
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Where sessions live [default: /var/lib/airlock as root, else $XDG_STATE_HOME/airlock]
    #[arg(long, global = true, value_name = "DIR", env = "AIRLOCK_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Ask a running 'airlock serve' instead of working here: unix:PATH, http://HOST:PORT or
    /// https://HOST:PORT (with the token in AIRLOCK_TOKEN; AIRLOCK_CA_FILE for a private CA)
    #[arg(long, global = true, value_name = "URL", env = "AIRLOCK_URL")]
    pub server: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in a new sandbox
    #[command(
        long_about = "Run COMMAND confined; its exit status becomes airlock's.\n\n\
            The workspace (default: the current directory) appears at its own path through a \
            copy-on-write overlay; the host directory is never written by a run. A plain run is \
            throwaway: its changes vanish with it, and live in memory (counted as the sandbox's \
            memory, at most the profile's tmp_size) where the kernel allows (as root, or Linux \
            6.6 and later), else in a session on disk that is deleted after the run. --keep keeps them on disk in a new session; \
            --session ID runs in a session (see 'airlock session new'), with its workspace and profile.\n\n\
            stdin is passed through, and signals to airlock are passed on to the command; a \
            second interrupt (INT, TERM or HUP) kills the sandbox. When stdout and stderr are both terminals the command writes \
            to them directly; otherwise (a pipe or a file: output that is kept) airlock relays \
            them and stops passing output on past the profile's output limit (64 MiB by default), \
            saying how much it dropped. When a destination fails, that stream's pipe is closed, \
            as on a plain pipe: a reader that went away ('airlock run -- yes | head -1') ends \
            the command with SIGPIPE (141); output lost otherwise (a full disk) is reported, and \
            a command that succeeded then exits 125.",
        after_help = "Profiles are looked up as NAME.toml in $XDG_CONFIG_HOME/airlock/profiles, then \
            /etc/airlock/profiles; never inside a workspace. Without such a file, a starter profile \
            of that name shipped with airlock (pip, npm, cargo, go, github, apt: 'airlock policy \
            list'), and without -p the built-in default: no network, no extra paths, 2 GiB \
            memory, 512 processes, 1 hour of CPU.\n\n\
            Limits that keep the host alive ([limits] in the profile): cpus = 1.5 is the CPU \
            bandwidth of the whole sandbox (its run's cgroup: v2 cpu.max, v1 cpu.cfs_quota_us; \
            default: every CPU but one); disk = \"10GiB\" and files = 1000000 bound the bytes and \
            files the workspace's layer may hold (a throwaway run's tmpfs: size= and nr_inodes=, \
            by the kernel; without disk, tmp_size). A session on disk may never take the state \
            directory's filesystem below a free margin (a twentieth of it, 64 MiB to 1 GiB, so \
            that the audit log can always be written): the supervisor watches the free space \
            and kills the run before it does, and RLIMIT_FSIZE holds each file to what is left. \
            A limit the profile names that the kernel cannot enforce here is refused: cpus \
            without a writable cpu cgroup (the sandbox would only get nice 19, which the default \
            falls back to), disk or files on an unprivileged session (no kernel quota bounds \
            its directory; as root, such a session gets a filesystem image of its own, which \
            the kernel holds to both). --allow-degraded=cpus or =disk accepts that; 'airlock check' lists each \
            limit and how it is enforced here.\n\n\
            Exit status: the command's own (128+N if signal N killed it); 124 the time limit \
            ended it; 152 its processes together used up the CPU time limit (128+SIGXCPU, as \
            for one process past its own); 153 a session's run reached the free-space margin \
            or its disk budget (128+SIGXFSZ, what a process past RLIMIT_FSIZE gets); 125 airlock refused or failed (the message says why and what to do); 126 \
            the command could not be executed; 127 it was not found."
    )]
    Run(RunArgs),
    /// Learn a profile from a trial run: the hosts a command reaches, and what it uses
    #[command(
        long_about = "Run COMMAND once with the network open, watch what it reaches and uses, \
            and write a profile that allows exactly that: the hosts and ports it connected to \
            (each with how many connections and which program), and limits from its peak \
            memory, CPU time and the files it wrote, with headroom. Everything else of the \
            base profile (-p/--profile-file, default: the built-in default) applies: the \
            filesystem, the environment, the other limits, every protection layer.\n\n\
            A learning run lets the command reach ANY public host: it is a person's act, \
            for a command you trust to show what it needs (your build, your test suite), \
            never one an agent made up. Private, loopback, link-local and cloud-metadata \
            addresses stay refused unless the base profile names them, what it denies stays \
            denied, and its secrets are not given (their variables are unset). Agents cannot \
            ask for it: an agent token, MCP and the hooks are refused. The run is audited \
            like any run, its intent as a 'run.learn' record; its changes are kept in a new \
            session for you to review or discard.\n\n\
            The profile goes to stdout, or to --out FILE (not overwritten: choose a new name); \
            --extend FILE adds this run's hosts and needs to a profile learned before and \
            writes it back. Read it, then try it: 'airlock policy check FILE' and 'airlock run \
            --profile-file FILE -- COMMAND'.",
        after_help = "Examples:\n  airlock learn --out ~/.config/airlock/profiles/pip.toml -- pip download -d /tmp/d six\n  \
            airlock learn --extend ~/.config/airlock/profiles/pip.toml -- pip download -d /tmp/d requests\n\n\
            Not seen: which host paths the command looked for and did not find (the kernel does \
            not tell the supervisor; strace does), and the most processes at once (cgroup v1 \
            has no peak): the base profile's stand.\n\n\
            Exit status: the command's (the profile is written all the same, with a warning \
            when it failed: what it needs may be more); 125 airlock refused or failed."
    )]
    Learn(LearnArgs),
    /// Show which protection layers this machine provides
    #[command(
        long_about = "Say which protection layers this machine provides and what 'run' will \
            enforce here. Namespaces, a private /proc, the hostname and overlayfs are tried in \
            a throwaway child; the Landlock ABI is asked of the kernel; seccomp is read from \
            /proc; cgroups are looked for where this user may create them (without them, rlimits \
            still apply). When every required layer is there, 'airlock run -- true' itself is \
            tried with the default profile in an empty workspace (recorded in the audit log as \
            any run), so that check never promises what run cannot do. Inside a container it \
            names what the container blocks and the ways forward (docs/containers.md). Then each \
            limit ([limits] cpus, disk, files, the free margin, memory, processes) and how it is \
            enforced here; a limit the kernel cannot enforce is refused by 'run' when a profile \
            names it (--allow-degraded=cpus or =disk accepts less). The closing verdict is the \
            worst of the lines. Exit status 0 when every layer is there and every limit \
            enforced (protection: full); 4 when 'run' works with less: a layer is partial (cgroups: \
            rlimits stand in) or a limit is refused (protection: partial); 3 when a layer is \
            missing: 'run' then refuses, unless the missing layer is one --allow-degraded may \
            accept (landlock) and you pass it."
    )]
    Check(CheckArgs),
    /// Start a session (see 'airlock session new --help')
    #[command(subcommand)]
    Session(SessionCommand),
    /// List sessions
    #[command(
        visible_alias = "ls",
        long_about = "List the sessions in the state directory, oldest first: id, name, profile, \
            workspace, when it was created and last run, its status (idle, running, applied, \
            discarded) and how many files it changed."
    )]
    Sessions(SessionsArgs),
    /// Show what a session changed, as a git patch
    #[command(
        long_about = "Show what a session changed against the host workspace as it is now.\n\n\
            The default output is a patch in git's format, binary files included: \
            'airlock diff ID | git apply' reproduces the session's tree in a copy of the \
            workspace. It is coloured when stdout is a terminal, and paged through $PAGER (or \
            less) when it is long. --stat and --name-status summarise as git does; --json gives \
            every change (directories and special files too) with modes, sizes, sha256 and \
            hazards: the changes 'apply' will refuse unless named. Changes the repository's \
            ignore rules hide (as they will be after the apply: the session's .gitignore files \
            count, and .git/info/exclude and the global excludes file) are listed apart on \
            stderr as not shown by git status, and marked \"ignored\" in --json. A directory \
            git ignores both now and after the apply (node_modules/, .venv/, target/) is one \
            tree: one row on stderr with its counts of files, directories, executables and \
            hazards (in --json, \"trees\", with the first executables and hazards by name), its \
            changes out of the patch unless a PATH at or in it is named; 'apply' writes it \
            whole or not at all. --no-ignored leaves out all that git ignores, as 'apply \
            --no-ignored' does.\n\n\
            Every diff shows the digest of the session's whole change set (on stderr, apart \
            from the patch; \"digest\" in --json): 'airlock apply ID --reviewed DIGEST' writes \
            exactly that set or nothing. The last diff shown is remembered for 'apply' without \
            --reviewed, which then names what it writes that this diff did not hold.",
        after_help = "Exit status: 0 whether or not there are changes; 125 on an unknown session \
            or a path outside the workspace."
    )]
    Diff(DiffArgs),
    /// Write a session's changes into the workspace
    #[command(
        long_about = "Write a session's changes (or those at or under PATH...) into the host \
            workspace.\n\n\
            Each file is written atomically (a temporary file in its directory, fsync, rename), \
            after the old version of every file it replaces or deletes was kept in the session's \
            state and the apply was recorded in a journal: if the apply is killed, every file is \
            either old or new, and the next 'airlock apply ID' finishes it ('--rollback' undoes \
            it instead). 'airlock revert ID' takes an apply back out.\n\n\
            A path the host changed since the session first touched it is a conflict: reported \
            and left alone unless --force. Hazards ('airlock diff --json' lists them) are left \
            alone unless named with --allow-hazard=PATH or --allow-hazards; setuid/setgid \
            files, device nodes and sockets are never written. All of a repository's .git is a \
            hazard (git runs what its config and hooks name): a session that ran git writes \
            its commits with --allow-hazard=.git once its diff was read. New files get the owner of the \
            workspace directory, replaced ones keep theirs. Content git status will not show \
            (ignored) that is executable or sits where tools run code from \
            (node_modules, .venv, site-packages, __pycache__) is a hazard; other ignored content is \
            applied, or left out with --no-ignored. When everything was written, the \
            session is marked applied and takes no more runs.\n\n\
            A directory git ignores (node_modules/, .venv/, target/: a tree, one row in \
            'airlock diff') is written whole or not at all, and only when named: its root as a \
            PATH ('airlock apply ID .venv') or as --allow-hazard=.venv, or --allow-hazards. \
            Naming it is the yes to the hazards in it (setuid files and devices are still never \
            written); if any of its paths is left out (a conflict, a refusal), none of it is \
            written. A PATH inside a tree is refused: name its root.\n\n\
            --reviewed DIGEST (the digest 'airlock diff' showed) writes exactly the change set \
            reviewed, or nothing: the apply waits for a run in progress, then compares under the \
            session's lock, so a file a run wrote after the diff was read is seen. The digest \
            covers the whole change set even when PATHs are named; a digest from 'diff \
            --no-ignored' is one for 'apply --no-ignored'. Without --reviewed, the apply says \
            which paths it writes that the last 'airlock diff' shown did not hold (or that no \
            diff was shown).",
        after_help = "Exit status: 0 everything was applied; 1 some paths were left out \
            (conflicts, hazards, trees not named; listed); 3 --reviewed: the session changed \
            since that diff, nothing was written; 125 airlock refused or failed."
    )]
    Apply(ApplyArgs),
    /// Take a session's last apply back out of the workspace
    #[command(
        long_about = "Undo the session's last apply: every path it wrote gets back exactly what \
            the host had (kept before the apply), every path it created is removed. A path the \
            host changed since the apply is left alone and reported. The session becomes active \
            again: its changes are still in its layer.",
        after_help = "Exit status: 0 everything was reverted; 1 some paths were left alone \
            (listed); 125 airlock refused or failed."
    )]
    Revert(RevertArgs),
    /// Drop a session's changes
    #[command(
        long_about = "Drop a session's layer: its changes are gone, the host workspace is not \
            touched. The session's record stays (status discarded) until 'airlock gc'. Waits for \
            a run in the session to end.",
        after_help = "Exit status: 0 discarded; 125 no such session, it was applied (revert it \
            first), or airlock failed."
    )]
    Discard(DiscardArgs),
    /// Show the audit log, or verify it
    #[command(
        long_about = "Show the audit log of the state directory: every run (intent and result), \
            session, apply, revert and refusal, written before each action. One line per record: \
            time (UTC), session, action, summary; --json prints the records as they are stored \
            (JSON lines). Filters combine. 'airlock log verify' walks the hash chain and names the \
            first record that was altered, removed or reordered.",
        after_help = "Examples:\n  airlock log --session fix --action run\n  \
            airlock log --since 1h --denied\n  airlock log --follow --json | jq .\n  \
            airlock log verify\n\n\
            Exit status of 'log verify': 0 the chain is intact; 2 it is broken (the message \
            names where); 125 it could not be read."
    )]
    Log(LogArgs),
    /// Kill running sandboxes now: a session's, a profile's, or all
    #[command(
        long_about = "Kill every process of the targeted running sandboxes now (the whole pid \
            namespace). Their sessions' layers are kept for review ('airlock diff'). Logged \
            before it acts. Only your own sandboxes (root: anyone's in its state directory).",
        after_help = "Exit status: 0 every target was killed (or none was running: nothing is \
            left to kill); 1 some could not be (listed); 125 no such session, or airlock failed."
    )]
    Kill(ControlArgs),
    /// Freeze every process of running sandboxes
    #[command(
        long_about = "Freeze every process of the targeted running sandboxes until 'airlock \
            resume': with the run's freezer cgroup where there is one, else by stopping each \
            process (SIGSTOP) until none is left running. Nothing inside runs meanwhile.",
        after_help = "Exit status: 0 every target was paused (or, with --profile or --all, none \
            was running); 1 some could not be (listed); 125 no such session, the session has no \
            running sandbox, or airlock failed."
    )]
    Pause(ControlArgs),
    /// Let paused sandboxes run again
    #[command(
        after_help = "Exit status: 0 every target runs again (or, with --profile or --all, none \
            was running); 1 some could not be resumed (listed); 125 no such session, the session \
            has no running sandbox, or airlock failed."
    )]
    Resume(ControlArgs),
    /// Refuse every run (of a profile, or all) until enabled again; kill those running
    #[command(
        long_about = "A persistent switch: until 'airlock enable', every run and every new \
            session (of PROFILE, or all) is refused with REASON, and the running sandboxes of \
            that scope are killed now. It is a file in the state directory: it survives \
            reboots. Logged before it acts.",
        after_help = "Exit status: 0 the switch is on (and the running sandboxes of its scope \
            were killed); 1 some could not be killed (listed); 125 airlock failed (an empty \
            --reason, an unwritable state directory)."
    )]
    Disable(DisableArgs),
    /// Lift a switch set by 'airlock disable'
    #[command(
        after_help = "Exit status: 0 the switch is off (also when it was not on: said on \
            stderr); 125 airlock failed."
    )]
    Enable(EnableArgs),
    /// Show switches, and running and paused sandboxes
    #[command(
        after_help = "Exit status: 0 shown; 125 the switches or the list of running sandboxes \
            could not be read (what could be read is still shown; a switch file that cannot be \
            read counts as disabled)."
    )]
    Status(StatusArgs),
    /// List the connections waiting for a person (the profile's [network] ask)
    #[command(
        long_about = "List the connections that wait for a person: a run's command connected to \
            a host its profile's [network] ask names and no allow entry does, and the gate holds \
            the connection until an operator answers ('airlock approve ID', 'airlock deny ID', \
            or the API) or the profile's ask_timeout (60 s unless it says) passes, which \
            refuses it. Each question is in the audit log (approval.asked) before it is listed.",
        after_help = "Examples:\n  airlock approvals\n  airlock approvals --json | jq -r \
            '.approvals[].id'\n\n\
            Exit status: 0 listed (also when none waits); 125 airlock failed."
    )]
    Approvals(ApprovalsArgs),
    /// Let a waiting connection through: for its run, or with --session for its session
    #[command(
        long_about = "Answer a waiting approval (see 'airlock approvals') with yes. Without \
            --session the run that asked may connect to that host and port (this connection and \
            its others there) until it ends; with --session, also every later run of its \
            session, without asking. The decision is in the audit log, naming you, before the \
            connection goes on. To allow the host for good, add the profile line it prints to \
            the profile.",
        after_help = "Examples:\n  airlock approve ap_3f9a0c1d2e4b5a6c\n  \
            airlock approve ap_3f9a0c1d2e4b5a6c --session --reason 'release notes need the API'\n\n\
            Exit status: 0 answered; 2 it cannot be answered any more (answered already, or \
            nobody answered in time and it was refused, or its run ended); 125 no such approval, \
            or airlock failed."
    )]
    Approve(ApproveArgs),
    /// Refuse a waiting connection
    #[command(
        long_about = "Answer a waiting approval (see 'airlock approvals') with no: the \
            connection is refused, and the run's summary says who refused it and why. Later \
            connections of that run to the same host and port are refused without asking.",
        after_help = "Examples:\n  airlock deny ap_3f9a0c1d2e4b5a6c --reason 'not during the \
            freeze'\n\n\
            Exit status: 0 answered; 2 it cannot be answered any more; 125 no such approval, or \
            airlock failed."
    )]
    Deny(DenyArgs),
    /// Remove discarded and applied sessions
    #[command(
        long_about = "Remove discarded sessions (their records; their layers are already gone) \
            and applied ones (their layers and the old files kept for 'revert': an applied \
            session removed can no longer be reverted). --older-than keeps those that ended \
            more recently; --dry-run lists them and removes nothing. Each removed session is \
            listed on stdout, and the removal is in the audit log (gc.intent) before it happens.",
        after_help = "Exit status: 0 done (also when nothing was to be removed); 125 airlock \
            failed (a bad --older-than, an unreadable state directory)."
    )]
    Gc(GcArgs),
    /// Write airlock's manual pages (airlock.1, airlock-run.1, …) into DIR
    #[command(
        long_about = "Write the manual pages of airlock and of each of its commands, from the \
            same text as --help, into DIR (for example /usr/local/share/man/man1; then 'man \
            airlock-run').",
        after_help = "Exit status: 0 written; 125 DIR could not be written."
    )]
    Man(ManArgs),
    /// Print the shell completion script for bash, zsh or fish
    #[command(
        long_about = "Print the completion script of SHELL on stdout: the shell then completes \
            airlock's commands, options and their values. The .deb package installs all three; \
            for a binary installed otherwise, write it where the shell looks (below).",
        after_help = "Install (system-wide as root, or for yourself):\n  \
            bash  airlock completions bash > /usr/local/share/bash-completion/completions/airlock\n        \
            airlock completions bash > ~/.local/share/bash-completion/completions/airlock\n  \
            zsh   airlock completions zsh > /usr/local/share/zsh/site-functions/_airlock\n        \
            airlock completions zsh > ~/.zfunc/_airlock  (~/.zshrc: fpath+=~/.zfunc before compinit)\n  \
            fish  airlock completions fish > /etc/fish/completions/airlock.fish\n        \
            airlock completions fish > ~/.config/fish/completions/airlock.fish\n\n\
            A new shell picks it up; bash and fish then also complete the names of your sessions \
            (diff, apply, revert, discard, --session) and profiles (-p, policy show), asking \
            'airlock __complete'. Exit status: 0 printed; 125 stdout could not be written."
    )]
    Completions(CompletionsArgs),
    /// The names a shell completes: sessions or profiles, one a line (for the completion scripts)
    #[command(name = "__complete", hide = true)]
    Complete(CompleteArgs),
    /// Serve airlock's HTTP API: a token per automation
    #[command(
        long_about = "Serve airlock's HTTP API until SIGTERM or SIGINT. Every request carries a \
            token ('Authorization: Bearer TOKEN'; make one with 'airlock token create'), bound to \
            a profile and a role: an agent token runs commands in sessions of its own over its \
            workspace and reads their diffs; only an operator token applies, reverts, discards, \
            kills or disables. Each run is carried out by a worker process exactly as 'airlock \
            run' would, and the audit log names the token of every request.\n\n\
            Listens on a unix socket in the state directory (mode 0600) by default; --listen \
            127.0.0.1:8700 for TCP. An address beyond loopback is refused without --tls-cert and \
            --tls-key, so that no token crosses a network in clear text. Started by systemd's \
            socket activation (LISTEN_FDS, LISTEN_PID), it serves on the one socket systemd \
            passed instead, under the same rules (see packaging/systemd/airlock.socket). GET \
            /openapi.json describes every endpoint; /mcp serves agents' MCP clients (see 'airlock mcp \
            --help').\n\n\
            On SIGTERM the server stops accepting connections, lets runs go on for --grace, then \
            interrupts the rest (each recorded as run.abandoned) and exits.\n\n\
            With [audit] export in airlock's config (--config), the server also sends each audit \
            record, as it is written, to stdout (one JSON line per record, as stored: what a \
            cluster's log collector reads; the server's own messages go to stderr) and/or to an \
            OpenTelemetry collector over OTLP/HTTP, each from where the last export stopped, in \
            order; runs never wait for it, and a collector that is down only makes it lag (see \
            'airlock log export --help'). A config that is wrong stops the server at start.",
        after_help = "Example:\n  token=$(airlock token create --profile ci --role agent --workspace ~/src/app | tail -1)\n  \
            airlock serve --listen 127.0.0.1:8700 &\n  \
            curl -s -H \"Authorization: Bearer $token\" -d '{\"command\": \"make test\"}' \\\n    \
            -H 'Content-Type: application/json' http://127.0.0.1:8700/v1/runs\n\n\
            Exit status: 0 stopped on a signal; 125 it could not start (the address, the TLS files, the state directory)."
    )]
    Serve(ServeArgs),
    /// Print a one-time link to the review page of the running 'airlock serve'
    #[command(
        long_about = "Print a one-time link that logs a browser in to the review page 'airlock \
            serve' shows at / (when it listens on TCP): the sessions of a profile, each run, the \
            audit log as it is written, the changes file by file with their hazards, apply, \
            revert, discard and the kill switch.\n\n\
            The link works once, within 10 minutes; its code follows '#' in the address, which \
            browsers never send on (not to a server's log, not in a Referer). The login it opens \
            is an HttpOnly, SameSite=Strict cookie bound to an operator token: --token names one, \
            else a new one is made for --profile (default: default) that lives 12 hours ('airlock \
            token revoke' ends it sooner). Agent tokens never open the page. Made at the machine \
            only: no API token can ask for a link.",
        after_help = "Example:\n  airlock serve --listen 127.0.0.1:8700 &\n  airlock review -p ci\n\n\
            Exit status: 0 printed; 125 refused (no server listening on TCP and no --url, an unknown \
            or agent token, an unknown profile)."
    )]
    Review(ReviewArgs),
    /// Serve an agent's MCP client on stdio: run, changes and log tools, no apply
    #[command(
        long_about = "Serve a Model Context Protocol client (Claude Code, Codex, an MCP SDK) on stdin \
            and stdout. Its tools: run (a command in airlock's sandbox over the workspace, in one \
            session of this client's, made at its first run; output as progress notifications), \
            start and poll (for commands longer than the client's tool timeout), changes (the \
            session's changed files with their hazards, and the patch) and log (the session's audit \
            records). There is no tool to apply, revert, discard, kill or change policy: the agent \
            works as an agent would with an agent token, and a person reviews and applies \
            ('airlock diff ID', 'airlock apply ID').\n\n\
            Protocol revisions: 2025-11-25 and earlier (with initialize) and 2026-07-28 (stateless). \
            Over HTTP the same tools are at /mcp on 'airlock serve'.",
        after_help = "Examples:\n  claude mcp add airlock -- airlock mcp --workspace ~/src/app\n  \
            codex mcp add airlock -- airlock mcp --workspace ~/src/app\n\n\
            Exit status: 0 the client closed the connection; 125 it could not start (the workspace, \
            the session, the state directory)."
    )]
    Mcp(McpArgs),
    /// Make, list and revoke the API's tokens
    #[command(subcommand)]
    Token(TokenCommand),
    /// Profiles: show one as runs apply it, check a file, list them, replay past runs against a draft
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Run Claude Code's Bash tool in airlock (see 'airlock claude-code settings --help')
    #[command(subcommand, name = "claude-code")]
    ClaudeCode(crate::claude_code::ClaudeCodeCommand),
    /// Run Codex's shell commands in airlock (see 'airlock codex settings --help')
    #[command(subcommand)]
    Codex(crate::codex::CodexCommand),
    /// airlock in agent-sandbox pods on Kubernetes: render the manifests of a pool
    #[command(subcommand)]
    K8s(K8sCommand),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub choice: ProfileAndWorkspace,
    /// Run in an existing session, by id or name: its earlier changes are visible, its workspace
    /// and profile apply
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Keep the run's changes in a new session, and say its id on stderr (stdout is the
    /// command's; scripts: 'airlock session new' prints the id alone, then run --session ID)
    #[arg(long)]
    pub keep: bool,
    /// Run even though these are missing: landlock; cpus (a cpus limit without a cpu cgroup:
    /// nice 19 only); disk (a disk or files limit on a session: a watch on free space only)
    #[arg(long, value_name = "LAYER,...", value_delimiter = ',')]
    pub allow_degraded: Vec<String>,
    /// Resolve NAME to IP in the network gate instead of asking the host (repeatable; the address
    /// is trusted: a loopback or private one given here is not refused)
    #[arg(long, value_name = "NAME=IP")]
    pub resolve: Vec<String>,
    /// Host uid and gid of the sandbox user when airlock runs as root (never 0, nor a uid a
    /// user of this host has); refused when not root, where the sandbox user is you
    #[arg(long, value_name = "ID", env = "AIRLOCK_SANDBOX_UID")]
    pub sandbox_uid: Option<u32>,
    /// Print one JSON object when the run ends, the answer 'airlock serve' gives to POST /v1/runs
    /// (exit_code, stdout, stderr, limit, session, …), instead of passing the output on; exits
    /// with the command's status all the same
    #[arg(long)]
    pub json: bool,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct LearnArgs {
    #[command(flatten)]
    pub choice: ProfileAndWorkspace,
    /// Write the learned profile to FILE (a new file) instead of stdout
    #[arg(long, value_name = "FILE", conflicts_with = "extend")]
    pub out: Option<PathBuf>,
    /// Add what this run needs to FILE, a profile learned before, and write it back
    #[arg(long, value_name = "FILE")]
    pub extend: Option<PathBuf>,
    /// Resolve NAME to IP in the network gate instead of asking the host (repeatable; trusted:
    /// a loopback or private address given here is reached)
    #[arg(long, value_name = "NAME=IP")]
    pub resolve: Vec<String>,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print a JSON object instead of a table
    #[arg(long)]
    pub json: bool,
}
