//! The kill switch: which sandboxes are running, and killing, pausing and resuming them from any
//! process; and the persistent switch that disables airlock (for one profile or all).
//!
//! ```text
//! STATE/running/PID.json   one per running sandbox, PID being its supervisor's: session,
//!                          profile, the sandbox's id (pid 1 and start time, freezer), started
//! STATE/switches.json      {"all": {reason, by, at} | null, "profiles": {NAME: {…}}}
//! ```
//!
//! Every action here is in the audit log before it acts. The kernel decides who may act: a user
//! can signal and freeze only their own sandboxes (and cannot read another user's state dir).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use airlock_jail::control::SandboxId;

use crate::audit;
use crate::io_failure::io;
use crate::session::now;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error(transparent)]
    Jail(#[from] airlock_jail::JailError),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Disabled(String),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    #[error("no running sandbox matches {0} — 'airlock status' lists them")]
    NoMatch(String),
    #[error("cannot encode an audit record: {0}")]
    Record(#[from] serde_json::Error),
}

crate::io_failure::io_variant!(ControlError, Io);

/// One running sandbox, as the registry records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Running {
    pub supervisor: u32,
    pub sandbox: SandboxId,
    pub session: Option<String>,
    pub profile: String,
    pub argv: Vec<String>,
    pub uid: u32,
    /// Seconds since the Unix epoch.
    pub started: u64,
    /// The id of the API token whose request started it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The run's id (its `run.intent` record's `run_id`), for the record that closes it should
    /// its supervisor end without doing so (see [`crate::abandoned`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Its supervisor holds a lock on the entry's file for as long as it lives (see
    /// [`Registration`]); an entry written before supervisors did is judged by its sandbox.
    #[serde(default)]
    pub locked: bool,
}

pub(crate) fn running_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("running")
}

/// The file that cuts the network of the run supervised by `supervisor` (see `Action::CutNetwork`).
pub fn cut_flag(state_dir: &Path, supervisor: u32) -> PathBuf {
    running_dir(state_dir).join(format!("{supervisor}.cut"))
}

/// The file that says why the run supervised by `supervisor` was killed by the kill switch
/// (written before the signal, read by that supervisor to say so).
fn killed_flag(state_dir: &Path, supervisor: u32) -> PathBuf {
    running_dir(state_dir).join(format!("{supervisor}.killed"))
}

/// The file that says the run supervised by `supervisor` is paused (written when it is paused,
/// removed when resumed): what a connection waiting for a person ends on.
fn paused_flag(state_dir: &Path, supervisor: u32) -> PathBuf {
    running_dir(state_dir).join(format!("{supervisor}.paused"))
}

/// Why the run supervised by `supervisor` may not go on waiting for a person, if the kill
/// switch stopped it: killed, paused, or its network cut.
pub(crate) fn run_flags(state_dir: &Path, supervisor: u32) -> Option<String> {
    if let Ok(why) = fs::read_to_string(killed_flag(state_dir, supervisor)) {
        return Some(format!("the run was killed ({})", why.trim()));
    }
    if paused_flag(state_dir, supervisor).exists() {
        return Some("the run was paused (airlock pause)".into());
    }
    if cut_flag(state_dir, supervisor).exists() {
        return Some("the network was cut (airlock kill --network)".into());
    }
    None
}

/// Registers a running sandbox for as long as it lives.
pub struct Registration {
    path: PathBuf,
    /// Locked (flock, exclusive) from the moment it has its name until this process ends: the
    /// kernel lets go of it when the supervisor dies, however it dies, and a reader in another
    /// pid namespace, or whose /proc hides this process, sees the lock all the same. What
    /// tells a live run from one whose supervisor is gone (see [`crate::abandoned`]).
    file: nix::fcntl::Flock<fs::File>,
}

impl Registration {
    /// Why the kill switch killed this run ("kill switch, uid N: REASON"), if it did.
    pub fn killed_by_switch(&self) -> Option<String> {
        let text = fs::read_to_string(self.path.with_extension("killed")).ok()?;
        Some(text.trim().to_string())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_file(self.path.with_extension("cut"));
        let _ = fs::remove_file(self.path.with_extension("killed"));
        let _ = fs::remove_file(self.path.with_extension("paused"));
    }
}

/// Room reserved for a registry entry: written before the sandbox starts, so that filling it in
/// afterwards needs no new space (on a full disk the run is refused before anything starts).
const ENTRY_BYTES: usize = 8192;

/// Reserve this run's registry entry, before its sandbox starts.
pub fn reserve(state_dir: &Path) -> Result<Registration, ControlError> {
    let dir = running_dir(state_dir);
    fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let path = dir.join(format!("{}.json", std::process::id()));
    // Made, locked and filled under a name no reader takes, then renamed into place: no reader
    // ever finds the entry unlocked while its supervisor lives.
    let making = dir.join(format!(".{}.json.new", std::process::id()));
    let _ = fs::remove_file(&making);
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&making)
        .map_err(io("create", &making))?;
    let file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| io("lock", &making)(std::io::Error::from(errno)))?;
    std::os::unix::fs::FileExt::write_all_at(&*file, &[b' '; ENTRY_BYTES], 0)
        .map_err(io("write", &making))?;
    // Never over another's entry: a live run of the same pid is another pid namespace's (two
    // airlock in containers sharing this state directory, each pid 1), and replacing its entry
    // would hide it from the kill switch. One whose supervisor is gone (a pid used again) is
    // closed first.
    let place = || {
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &making,
            nix::fcntl::AT_FDCWD,
            &path,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
    };
    let placed = match place() {
        Err(nix::errno::Errno::EEXIST) => {
            crate::abandoned::close_entry(state_dir, &path);
            place()
        }
        placed => placed,
    };
    match placed {
        Ok(()) => Ok(Registration { path, file }),
        Err(errno) => {
            let _ = fs::remove_file(&making);
            let why = if errno == nix::errno::Errno::EEXIST {
                std::io::Error::other(format!(
                    "a live run of another airlock is registered under this process's pid ({}): airlock processes in different pid namespaces share this state directory; give each its own (--state-dir)",
                    std::process::id()
                ))
            } else {
                std::io::Error::from(errno)
            };
            Err(io("register the run as", &path)(why).into())
        }
    }
}

impl Registration {
    /// Fill in the started sandbox, in the space reserved for it.
    pub fn fill(&self, entry: &Running) -> Result<(), ControlError> {
        let mut text = serde_json::to_vec(entry)
            .map_err(|e| io("encode", &self.path)(std::io::Error::other(e)))?;
        if text.len() > ENTRY_BYTES {
            // A very long command line: keep its start.
            let mut shorter = entry.clone();
            shorter.argv.truncate(8);
            for arg in &mut shorter.argv {
                arg.truncate(256);
            }
            text = serde_json::to_vec(&shorter)
                .map_err(|e| io("encode", &self.path)(std::io::Error::other(e)))?;
        }
        text.resize(ENTRY_BYTES, b' ');
        std::os::unix::fs::FileExt::write_all_at(&*self.file, &text, 0)
            .map_err(io("write", &self.path))?;
        Ok(())
    }
}

/// Every sandbox still running. The entries of runs whose supervisor is gone are closed first
/// (see [`crate::abandoned`]); a sandbox that ended while its supervisor records its result is
/// not listed.
pub fn running(state_dir: &Path) -> Vec<Running> {
    crate::abandoned::close(state_dir);
    let dir = running_dir(state_dir);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json")
            || entry.file_name().to_string_lossy().starts_with('.')
        {
            continue;
        }
        let Ok(text) = fs::read(&path) else { continue };
        let text = text.trim_ascii();
        if text.is_empty() {
            // Reserved by a run that is starting: its sandbox does not exist yet.
            continue;
        }
        if let Ok(run) = serde_json::from_slice::<Running>(text) {
            if run.sandbox.is_alive() {
                found.push(run);
            }
        }
    }
    found.sort_by_key(|r| (r.started, r.supervisor));
    found
}

/// Which running sandboxes an action targets.
#[derive(Debug, Clone)]
pub enum Target {
    Session(String),
    Profile(String),
    /// The sandbox with this pid (its pid 1 on the host, as `status` shows it), or the one
    /// supervised by the airlock process with this pid: a throwaway run has no session to name.
    Pid(u32),
    All,
}

impl Target {
    fn matches(&self, run: &Running) -> bool {
        match self {
            Target::Session(id) => run.session.as_deref() == Some(id.as_str()),
            Target::Profile(name) => &run.profile == name,
            Target::Pid(pid) => run.sandbox.pid == *pid as i32 || run.supervisor == *pid,
            Target::All => true,
        }
    }

    /// The session it names, if it names one.
    fn session(&self) -> Option<&str> {
        match self {
            Target::Session(id) => Some(id),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Session(id) => format!("session {id}"),
            Target::Profile(name) => format!("profile {name}"),
            Target::Pid(pid) => format!("pid {pid}"),
            Target::All => "all".into(),
        }
    }
}

/// `kill.intent`, `pause.intent`, …: which sandboxes, and why.
#[derive(Serialize)]
struct ActIntent<'a> {
    target: String,
    session: Option<&'a str>,
    reason: Option<&'a str>,
    sandboxes: Vec<Targeted<'a>>,
}

#[derive(Serialize)]
struct Targeted<'a> {
    supervisor: u32,
    pid: i32,
    session: Option<&'a str>,
    profile: &'a str,
}

/// `kill.result`, …: what happened to each.
#[derive(Serialize)]
struct ActResult<'a> {
    target: String,
    session: Option<&'a str>,
    sandboxes: &'a [Acted],
}

/// `disable` and `enable`: which switch, and why.
#[derive(Serialize)]
struct SwitchRecord<'a> {
    profile: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// What happened to each targeted sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct Acted {
    pub supervisor: u32,
    pub pid: i32,
    pub session: Option<String>,
    pub profile: String,
    /// None: done; Some: why not.
    pub error: Option<String>,
}

/// Kill, pause or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Kill,
    Pause,
    Resume,
    /// Close the sandbox's connections and refuse new ones; its processes go on.
    CutNetwork,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::CutNetwork => "cut_network",
        }
    }
}

/// Act on every running sandbox `target` names; the intent is logged first.
pub fn act(
    state_dir: &Path,
    log: &audit::Log,
    action: Action,
    target: &Target,
    reason: Option<&str>,
) -> Result<Vec<Acted>, ControlError> {
    let targets: Vec<Running> = running(state_dir)
        .into_iter()
        .filter(|run| target.matches(run))
        .collect();
    // A session with nothing running is nothing to kill; a pid that matches nothing is a mistake.
    let mistaken = match target {
        Target::Session(_) => action != Action::Kill,
        Target::Pid(_) => true,
        _ => false,
    };
    if targets.is_empty() && mistaken {
        return Err(ControlError::NoMatch(target.describe()));
    }
    audit::append(
        log,
        &format!("{}.intent", action.name()),
        serde_json::to_value(ActIntent {
            target: target.describe(),
            session: target.session(),
            reason,
            sandboxes: targets
                .iter()
                .map(|r| Targeted {
                    supervisor: r.supervisor,
                    pid: r.sandbox.pid,
                    session: r.session.as_deref(),
                    profile: &r.profile,
                })
                .collect(),
        })?,
    )?;
    if let (Action::Kill, Target::Session(id)) = (action, target) {
        // Before the kill: a run waiting for this session takes it the moment the killed one
        // lets go, and must find the mark then.
        if let Ok(session) = crate::Session::find(state_dir, id) {
            session.mark_killed()?;
        }
    }
    let acted: Vec<Acted> = targets
        .iter()
        .map(|run| {
            let result = match action {
                // Signalled here, waited for below: all die at once. The run's supervisor
                // finds why, to say so.
                Action::Kill => {
                    let why = format!(
                        "kill switch, uid {}{}",
                        nix::unistd::getuid(),
                        reason.map(|r| format!(": {r}")).unwrap_or_default()
                    );
                    let _ = fs::write(killed_flag(state_dir, run.supervisor), why);
                    run.sandbox.send_kill().map(drop)
                }
                Action::Pause => {
                    let _ = fs::write(paused_flag(state_dir, run.supervisor), b"paused\n");
                    run.sandbox.pause()
                }
                Action::Resume => {
                    let _ = fs::remove_file(paused_flag(state_dir, run.supervisor));
                    run.sandbox.resume()
                }
                Action::CutNetwork => cut_network(state_dir, run),
            };
            Acted {
                supervisor: run.supervisor,
                pid: run.sandbox.pid,
                session: run.session.clone(),
                profile: run.profile.clone(),
                error: result.err().map(|e| e.to_string()),
            }
        })
        .collect();
    if action == Action::Kill {
        for run in &targets {
            run.sandbox.wait_gone();
        }
    }
    audit::append(
        log,
        &format!("{}.result", action.name()),
        serde_json::to_value(ActResult {
            target: target.describe(),
            session: target.session(),
            sandboxes: &acted,
        })?,
    )?;
    Ok(acted)
}

/// Raise the run's cut flag, which its gate watches.
fn cut_network(state_dir: &Path, run: &Running) -> Result<(), airlock_jail::JailError> {
    let flag = cut_flag(state_dir, run.supervisor);
    fs::write(&flag, b"cut\n").map_err(|e| {
        airlock_jail::JailError::Caller(format!("cannot write {}: {e}", flag.display()))
    })
}

/// One disabling switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub reason: String,
    /// uid that set it.
    pub by: u32,
    /// Seconds since the Unix epoch.
    pub at: u64,
}

/// The persistent switches of a state dir.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switches {
    #[serde(default)]
    pub all: Option<Switch>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Switch>,
}

fn switches_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SWITCHES_FILE)
}

/// The kill switch's file in the state directory: replaced whole (renamed into place) at every
/// change, which is what a watcher of the directory sees.
pub const SWITCHES_FILE: &str = "switches.json";

/// The switches in force. A file that cannot be read counts as "all disabled": failing open
/// would let runs through that someone meant to stop.
pub fn switches(state_dir: &Path) -> Result<Switches, ControlError> {
    let path = switches_path(state_dir);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            ControlError::Disabled(format!(
                "{} is damaged ({e}): airlock treats everything as disabled until it is fixed or removed",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Switches::default()),
        Err(e) => Err(io("read", &path)(e).into()),
    }
}

/// Read the switches, change them and write them back, under `switches.lock`: two switches set
/// at once (two operators, the API's concurrent requests) must not write the same temporary
/// file, nor one of them drop the other's switch.
fn update_switches(
    state_dir: &Path,
    change: impl FnOnce(&mut Switches),
) -> Result<(), ControlError> {
    fs::create_dir_all(state_dir).map_err(io("create", state_dir))?;
    let lock_path = state_dir.join("switches.lock");
    let _lock = crate::paths::lock_exclusive(&lock_path).map_err(io("lock", &lock_path))?;
    let mut current = switches(state_dir).unwrap_or_default();
    change(&mut current);
    save_switches(state_dir, &current)
}

fn save_switches(state_dir: &Path, switches: &Switches) -> Result<(), ControlError> {
    let path = switches_path(state_dir);
    fs::create_dir_all(state_dir).map_err(io("create", state_dir))?;
    let temp = state_dir.join(".switches.json");
    let mut text = serde_json::to_vec_pretty(switches)
        .map_err(|e| io("encode", &path)(std::io::Error::other(e)))?;
    text.push(b'\n');
    let file = fs::File::create(&temp).map_err(io("write", &temp))?;
    std::io::Write::write_all(&mut &file, &text)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &temp))?;
    fs::rename(&temp, &path).map_err(io("write", &path))?;
    fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", state_dir))?;
    Ok(())
}

/// Refuse if airlock is disabled for `profile` (or entirely).
pub fn check_enabled(state_dir: &Path, profile: &str) -> Result<(), ControlError> {
    let switches = switches(state_dir)?;
    let explain = |scope: &str, switch: &Switch, enable: &str| {
        let at = humantime_like(switch.at);
        ControlError::Disabled(format!(
            "airlock is disabled {scope} since {at} by uid {}: {} — '{enable}' lifts it",
            switch.by, switch.reason
        ))
    };
    if let Some(switch) = &switches.all {
        return Err(explain("for every profile", switch, "airlock enable"));
    }
    if let Some(switch) = switches.profiles.get(profile) {
        return Err(explain(
            &format!("for profile {profile}"),
            switch,
            &format!("airlock enable --profile {profile}"),
        ));
    }
    Ok(())
}

fn humantime_like(seconds: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Disable airlock for `profile` (or entirely), then kill its running sandboxes.
pub fn disable(
    state_dir: &Path,
    log: &audit::Log,
    profile: Option<&str>,
    reason: &str,
) -> Result<Vec<Acted>, ControlError> {
    audit::append(
        log,
        "disable",
        serde_json::to_value(SwitchRecord {
            profile,
            reason: Some(reason),
        })?,
    )?;
    let switch = Switch {
        reason: reason.to_string(),
        by: nix::unistd::getuid().as_raw(),
        at: now(),
    };
    update_switches(state_dir, |current| match profile {
        Some(name) => {
            current.profiles.insert(name.to_string(), switch);
        }
        None => current.all = Some(switch),
    })?;
    let target = match profile {
        Some(name) => Target::Profile(name.to_string()),
        None => Target::All,
    };
    act(state_dir, log, Action::Kill, &target, Some(reason))
}

/// Lift the switch for `profile` (or the one for everything).
pub fn enable(
    state_dir: &Path,
    log: &audit::Log,
    profile: Option<&str>,
) -> Result<(), ControlError> {
    let record = SwitchRecord {
        profile,
        reason: None,
    };
    audit::append(log, "enable", serde_json::to_value(record)?)?;
    update_switches(state_dir, |current| match profile {
        Some(name) => {
            current.profiles.remove(name);
        }
        None => current.all = None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_set_at_once_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_path_buf();
        let profiles: Vec<String> = (0..8).map(|i| format!("profile{i}")).collect();
        std::thread::scope(|scope| {
            for name in &profiles {
                let state = &state;
                scope.spawn(move || {
                    for _ in 0..5 {
                        disable(state, &audit::log(state), Some(name), "incident").unwrap();
                        enable(state, &audit::log(state), Some(name)).unwrap();
                    }
                    disable(state, &audit::log(state), Some(name), "incident").unwrap();
                });
            }
        });
        let kept = switches(&state).unwrap();
        let names: Vec<&String> = kept.profiles.keys().collect();
        assert_eq!(names, profiles.iter().collect::<Vec<_>>());
    }

    /// A run's supervisor killed, its pid given to this process since: the stale entry under
    /// the name this run needs is closed (and recorded), not taken for another namespace's.
    #[test]
    fn an_entry_left_under_this_pid_is_closed_before_the_run_takes_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let stale = Running {
            supervisor: std::process::id(),
            sandbox: SandboxId {
                pid: i32::MAX,
                start_time: 0,
                freezer: None,
            },
            session: None,
            profile: "default".into(),
            argv: vec!["true".into()],
            uid: 0,
            started: 0,
            token: None,
            run_id: Some("0123abcd".into()),
            locked: true,
        };
        let entries = running_dir(state);
        fs::create_dir_all(&entries).unwrap();
        let name = entries.join(format!("{}.json", std::process::id()));
        fs::write(&name, serde_json::to_vec(&stale).unwrap()).unwrap();
        let registration = reserve(state).unwrap();
        let log = fs::read_to_string(state.join("audit.log")).unwrap();
        assert!(
            log.contains("run.abandoned") && log.contains("0123abcd"),
            "{log}"
        );
        drop(registration);
        assert!(!name.exists());
    }
}
