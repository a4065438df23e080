//! Warm sandboxes for a server: a few warm workers (see [`crate::warm`]) per kind of run, each
//! started and preparing its sandbox before a request needs it. A run of that kind takes one
//! instead of starting a worker; the worker is used for that one run and ends with it. The pool
//! is refilled once a run ends, bounded per kind and in all, and emptied of what waited too long
//! or is no longer asked for; the workers of a profile the kill switch disables end at once (the
//! pool watches the switch's file: see [`keep_swept`]).
//!
//! A kind is everything of a job but its command, environment, time limit and request line:
//! the same token, profile, workspace, role and options. Only throwaway runs (no session, not
//! kept, not learning) whose input is not the front end's own stdin are pooled.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::process::{Child, Command};

use crate::job::{Job, JOB_VAR, WARM_VAR};
use crate::jobs::Input;

/// How many warm workers a kind keeps, and how many the pool holds in all, by default.
pub const DEFAULT_PER_KIND: usize = 2;
pub const DEFAULT_MAX_WORKERS: usize = 8;

/// A kind not asked for this long has its workers ended.
const UNUSED_FOR: Duration = Duration::from_secs(120);

/// A kind not asked for this long may give up its workers to make room for another's.
const EVICTABLE_AFTER: Duration = Duration::from_secs(10);

/// The most kinds the pool remembers; past it, those with no worker waiting are forgotten
/// first, then the one asked for least recently.
const MAX_KINDS: usize = 64;

/// A warm worker is ended (and replaced) this long before core would no longer use its sandbox
/// (`airlock_core::WARM_MAX_WAIT`), so that a request never takes one on the edge.
const RETIRE_BEFORE_MAX_WAIT: Duration = Duration::from_secs(10);

/// How often the pool looks for ended, old and unused workers.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A worker preparing or holding its sandbox, waiting for its job on stdin.
pub(crate) struct Warm {
    pub(crate) child: Child,
    born: Instant,
}

/// Whether the token of a kind's runs still opens the door (the server's tokens decide).
pub type TokenValid = Arc<dyn Fn() -> bool + Send + Sync>;

struct Kind {
    /// What its workers prepare: a job without a command.
    template: Job,
    idle: VecDeque<Warm>,
    last_asked: Instant,
    token_valid: TokenValid,
}

impl Kind {
    /// Nothing is kept warm for a token revoked or expired, nor for a profile the kill switch
    /// holds off (core's check).
    fn wanted(&self) -> bool {
        (self.token_valid)() && !disabled(&self.template)
    }
}

#[derive(Default)]
struct Kinds {
    by_key: HashMap<String, Kind>,
    closed: bool,
}

impl Kinds {
    fn workers(&self) -> usize {
        self.by_key.values().map(|kind| kind.idle.len()).sum()
    }
}

pub struct WarmPool {
    exe: PathBuf,
    results_dir: PathBuf,
    per_kind: usize,
    max_workers: usize,
    kinds: Mutex<Kinds>,
    next: std::sync::atomic::AtomicU64,
}

impl WarmPool {
    /// A pool that starts `exe __serve-worker` for its workers, their job files in
    /// `results_dir`. `per_kind` 0: nothing is kept warm.
    pub fn new(exe: PathBuf, results_dir: PathBuf, per_kind: usize, max_workers: usize) -> Self {
        WarmPool {
            exe,
            results_dir,
            per_kind,
            max_workers,
            kinds: Mutex::new(Kinds::default()),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The kind of `job` with this input, if it may be pooled.
    pub(crate) fn kind_of(job: &Job, stdin: &Input) -> Option<(String, Job)> {
        if !job.run.is_throwaway() || matches!(stdin, Input::Inherit) {
            return None;
        }
        let mut template = job.clone();
        // One kind for one place, however a request spells it (a relative one is the token's
        // workspace's to resolve: only tidied). Core judges the place again at the run.
        if let Some(workspace) = template.run.workspace.as_mut() {
            *workspace = if workspace.is_absolute() {
                std::fs::canonicalize(&*workspace).ok()?
            } else {
                // `a`, `./a` and `a/` alike (`..` is core's to judge: kept).
                workspace
                    .components()
                    .filter(|part| *part != std::path::Component::CurDir)
                    .collect()
            };
        }
        template.run.argv.clear();
        template.run.env = None;
        template.run.timeout = None;
        template.asked.clear();
        template.result_file = PathBuf::new();
        let key = serde_json::to_string(&template).ok()?;
        Some((key, template))
    }

    /// A warm worker of this kind, if one is ready to take a job; the kind is remembered as
    /// asked for either way.
    pub(crate) fn take(&self, key: &str) -> Option<Warm> {
        let mut kinds = self.kinds.lock().ok()?;
        let kind = kinds.by_key.get_mut(key)?;
        kind.last_asked = Instant::now();
        while let Some(mut warm) = kind.idle.pop_front() {
            let young = warm.born.elapsed() < retire_at();
            if young && matches!(warm.child.try_wait(), Ok(None)) {
                return Some(warm);
            }
            let _ = warm.child.start_kill();
        }
        None
    }

    /// Bring the kind's warm workers up to its number (within the pool's bound, making room by
    /// ending those of the kind asked for least recently), its template `template`. Called once
    /// a run of that kind has ended, off its path.
    pub(crate) fn refill(&self, key: String, template: &Job, token_valid: TokenValid) {
        if self.per_kind == 0 {
            return;
        }
        let Ok(mut kinds) = self.kinds.lock() else {
            return;
        };
        if kinds.closed {
            return;
        }
        forget_kinds_past_the_bound(&mut kinds, &key);
        let kind = kinds.by_key.entry(key.clone()).or_insert_with(|| Kind {
            template: template.clone(),
            idle: VecDeque::new(),
            last_asked: Instant::now(),
            token_valid,
        });
        // Asked under the lock, so that a drain of the kill switch is not followed by a refill.
        if !kind.wanted() {
            kind.idle.clear();
            return;
        }
        let missing = self.per_kind.saturating_sub(kind.idle.len());
        make_room(&mut kinds, &key, missing, self.max_workers);
        let room = self.max_workers.saturating_sub(kinds.workers());
        let Some(kind) = kinds.by_key.get_mut(&key) else {
            return;
        };
        let wanted = missing.min(room);
        for _ in 0..wanted {
            match self.start(&kind.template) {
                Some(warm) => kind.idle.push_back(warm),
                None => break,
            }
        }
    }

    /// Start one warm worker, its job file written first.
    fn start(&self, template: &Job) -> Option<Warm> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let job_file = self
            .results_dir
            .join(format!("{}-warm-{n}.job.json", std::process::id()));
        let _ = std::fs::remove_file(&job_file);
        crate::jobs::write_job(&job_file, template).ok()?;
        let child = Command::new(&self.exe)
            .arg("__serve-worker")
            .env(JOB_VAR, &job_file)
            .env(WARM_VAR, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // SECURITY: a worker the pool lets go (old, unused, the pool closed) takes its
            // sandbox with it (its parent-death signal covers the server's own end).
            .kill_on_drop(true)
            .spawn();
        match child {
            Ok(child) => Some(Warm {
                child,
                born: Instant::now(),
            }),
            Err(_) => {
                let _ = std::fs::remove_file(&job_file);
                None
            }
        }
    }

    /// End the workers that ended by themselves, that are near the end of their sandbox's life
    /// (replaced), and those of kinds no longer asked for or no longer wanted (a disabled
    /// profile, a revoked token).
    pub fn sweep(&self) {
        let Ok(mut kinds) = self.kinds.lock() else {
            return;
        };
        let mut replace = Vec::new();
        kinds.by_key.retain(|key, kind| {
            let before = kind.idle.len();
            kind.idle.retain_mut(|warm| {
                let alive = matches!(warm.child.try_wait(), Ok(None));
                alive && warm.born.elapsed() < retire_at()
            });
            let unused = kind.last_asked.elapsed() > UNUSED_FOR || !(kind.token_valid)();
            if disabled(&kind.template) {
                kind.idle.clear();
            }
            if !unused && kind.idle.len() < before {
                replace.push((key.clone(), kind.template.clone(), kind.token_valid.clone()));
            }
            !unused
        });
        drop(kinds);
        for (key, template, token_valid) in replace {
            self.refill(key, &template, token_valid);
        }
    }

    /// End at once the waiting workers of every kind whose profile the kill switch holds off
    /// (core's answer), with their sandboxes; their kinds are kept, refilled once enabled.
    pub fn drain_disabled(&self) {
        if let Ok(mut kinds) = self.kinds.lock() {
            for kind in kinds.by_key.values_mut() {
                if disabled(&kind.template) {
                    kind.idle.clear();
                }
            }
        }
    }

    /// No more workers; those waiting end now (with their sandboxes).
    pub fn close(&self) {
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.closed = true;
            kinds.by_key.clear();
        }
    }
}

fn retire_at() -> Duration {
    airlock_core::WARM_MAX_WAIT.saturating_sub(RETIRE_BEFORE_MAX_WAIT)
}

/// Forget kinds until one more fits under [`MAX_KINDS`]: those with no worker waiting first,
/// the one asked for least recently among them (`key`'s is kept).
fn forget_kinds_past_the_bound(kinds: &mut Kinds, key: &str) {
    while kinds.by_key.len() >= MAX_KINDS && !kinds.by_key.contains_key(key) {
        let forgotten = kinds
            .by_key
            .iter()
            .min_by_key(|(_, kind)| (!kind.idle.is_empty(), kind.last_asked))
            .map(|(other, _)| other.clone());
        match forgotten {
            Some(other) => drop(kinds.by_key.remove(&other)),
            None => return,
        }
    }
}

/// End waiting workers of the kinds asked for least recently (other than `key`'s) until
/// `missing` more fit under `max_workers`, one worker at a time, and only from kinds not asked
/// for in [`EVICTABLE_AFTER`]: kinds asked for in turn, more than the pool holds, must not
/// end each other's workers at every run (each would then be prepared for nothing).
fn make_room(kinds: &mut Kinds, key: &str, missing: usize, max_workers: usize) {
    while kinds.workers() + missing > max_workers {
        let oldest = kinds
            .by_key
            .iter()
            .filter(|(other, kind)| {
                other.as_str() != key
                    && !kind.idle.is_empty()
                    && kind.last_asked.elapsed() > EVICTABLE_AFTER
            })
            .min_by_key(|(_, kind)| kind.last_asked)
            .map(|(other, _)| other.clone());
        match oldest.and_then(|other| kinds.by_key.get_mut(&other)) {
            Some(kind) => drop(kind.idle.pop_front()),
            None => return,
        }
    }
}

/// Whether the kill switch holds off the profile of `template`'s runs (core's check, in the
/// state directory core resolves for the job's caller; one it cannot resolve counts as held
/// off: nothing is prepared for it).
fn disabled(template: &Job) -> bool {
    match crate::worker::caller(template).state_dir() {
        Ok(state_dir) => {
            airlock_core::control::check_enabled(&state_dir, &template.profile).is_err()
        }
        Err(_) => true,
    }
}

/// Sweep `pool` every [`SWEEP_EVERY`] (which drains what the kill switch disables) until the
/// task is dropped; and, on a thread of its own for the server's life, drain as soon as the
/// switch's file in `state_dir` changes.
pub async fn keep_swept(pool: Arc<WarmPool>, state_dir: PathBuf) {
    watch_switches(pool.clone(), &state_dir);
    let mut sweeps = tokio::time::interval(SWEEP_EVERY);
    loop {
        sweeps.tick().await;
        pool.sweep();
    }
}

/// An inotify watch on the state directory for the kill switch's file (renamed into place at
/// each change), read on a thread that blocks on it (registering a raw descriptor with tokio
/// is for airlock-jail alone, by DESIGN's rules), and never closed (closing one waits for a
/// kernel grace period). Without it (inotify refused), the sweeps alone drain, within a second.
fn watch_switches(pool: Arc<WarmPool>, state_dir: &std::path::Path) {
    let Ok(watch) = Inotify::init(InitFlags::IN_CLOEXEC) else {
        return;
    };
    let changes =
        AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_DELETE;
    if watch.add_watch(state_dir, changes).is_err() {
        return;
    }
    let switches = std::ffi::OsStr::new(airlock_core::control::SWITCHES_FILE);
    let _ = std::thread::Builder::new()
        .name("airlock-switch-watch".into())
        .spawn(move || {
            // The audit log's files change at every record: only the switch's file counts, or
            // events lost (the queue overflowed). Should the watch end, each sweep drains.
            while let Ok(events) = watch.read_events() {
                let changed = events.iter().any(|e| {
                    e.name.as_deref() == Some(switches)
                        || e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                });
                if changed {
                    pool.drain_disabled();
                }
            }
        });
}
