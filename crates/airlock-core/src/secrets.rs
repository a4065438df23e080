//! A profile's `[[secret]]`s made ready for a run: a placeholder for the sandbox to hold, and
//! each value read from its source on the host. The values stay in this process (the
//! supervisor), for the network gate to put on the wire; they are never written anywhere.
//!
//! A run asks twice: [`placeholders_for_run`] before its sandbox is built (the sandbox's
//! environment holds them), then [`for_run`] once the sandbox's processes are cloned and before
//! its command starts, for the values.
//!
//! ```text
//! STATE/sessions/ID/placeholders.json   secret name → placeholder, 0600: made when the session
//!                                        starts, the same for every run of it
//! ```
//!
//! A run without a session gets fresh placeholders.

mod placeholder;
mod source;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use airlock_egress::inject::{Inject, Secret};
use airlock_policy::{Injection, Profile, SecretSpec};
use zeroize::Zeroizing;

use crate::error::Error;
use crate::session::Session;
use placeholder::Random;

/// Where a session keeps its secrets' placeholders (never their values).
const PLACEHOLDERS_FILE: &str = "placeholders.json";

/// What the sandbox holds in place of one secret: `name`=`placeholder` in its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub name: String,
    pub placeholder: String,
}

/// The placeholders of a run of `profile`, before its sandbox is built: those `session` keeps,
/// fresh ones for a run without a session (None). A secret that needs a fresh one (its shape is
/// the value's) has its value read now, and dropped at once; a source that fails fails the run
/// before anything of it is built. A secret the session has none for yet (the profile gained
/// it) gets one, kept.
pub(crate) fn placeholders_for_run(
    profile: &Profile,
    session: Option<&Session>,
) -> Result<Vec<Placeholder>, Error> {
    if profile.secrets.is_empty() {
        return Ok(Vec::new());
    }
    let mut kept = match session {
        Some(session) => load_placeholders(&session.dir)?,
        None => BTreeMap::new(),
    };
    let mut random = None;
    let mut added = false;
    for spec in &profile.secrets {
        if kept.contains_key(&spec.name) {
            continue;
        }
        let random = match &mut random {
            Some(random) => random,
            None => random.insert(Random::open().map_err(urandom)?),
        };
        let placeholder = new_placeholder(spec, &read_value(spec)?, random)?;
        kept.insert(spec.name.clone(), placeholder);
        added = true;
    }
    if let (true, Some(session)) = (added, session) {
        store_placeholders(&session.dir, &kept)?;
    }
    Ok(profile
        .secrets
        .iter()
        .filter_map(|spec| {
            kept.remove(&spec.name).map(|placeholder| Placeholder {
                name: spec.name.clone(),
                placeholder,
            })
        })
        .collect())
}

/// The secrets of a run of `profile`, each value read now, paired with its placeholder (from
/// [`placeholders_for_run`]). This process is made non-dumpable first. Called once the sandbox's
/// processes are cloned (none of them holds a copy of this process's memory with a value in
/// it), before its command may start: a source that fails now stops the run.
pub(crate) fn for_run(
    profile: &Profile,
    placeholders: &[Placeholder],
) -> Result<Vec<Secret>, Error> {
    if profile.secrets.is_empty() {
        return Ok(Vec::new());
    }
    keep_out_of_dumps()?;
    profile
        .secrets
        .iter()
        .map(|spec| {
            let placeholder = placeholders
                .iter()
                .find(|p| p.name == spec.name)
                .ok_or_else(|| {
                    unavailable(
                        spec,
                        "no placeholder was made for it (a bug) — run it again".into(),
                    )
                })?;
            let value = read_value(spec)?;
            // Only a session's file, altered, could say so: the sandbox would hold the value.
            if *value == placeholder.placeholder {
                return Err(unavailable(spec, "its session's placeholder is the value itself (placeholders.json altered?) — discard the session and start a new one".into()));
            }
            Ok(Secret {
                name: spec.name.clone(),
                hosts: spec.hosts.clone(),
                placeholder: placeholder.placeholder.clone(),
                value,
                inject: for_the_gate(&spec.inject),
            })
        })
        .collect()
}

/// How the gate puts a value in, as the profile says it.
fn for_the_gate(injection: &Injection) -> Inject {
    match injection.clone() {
        Injection::Header { name, format } => Inject::Header { name, format },
        Injection::Basic { username } => Inject::Basic { username },
        Injection::Query { param } => Inject::Query { param },
        Injection::Placeholder { headers } => Inject::Placeholder {
            headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
        },
    }
}

/// A new session's placeholders, each made from its value, read now: a source that fails fails
/// the session before anything of it is made.
pub(crate) fn for_new_session(profile: &Profile) -> Result<Vec<Placeholder>, Error> {
    placeholders_for_run(profile, None)
}

/// Keep a new session's placeholders, for all its runs.
pub(crate) fn keep_for_session(
    session: &Session,
    placeholders: &[Placeholder],
) -> Result<(), Error> {
    if placeholders.is_empty() {
        return Ok(());
    }
    let placeholders = placeholders
        .iter()
        .map(|p| (p.name.clone(), p.placeholder.clone()))
        .collect();
    store_placeholders(&session.dir, &placeholders)
}

/// From now on this process (which is about to hold values) leaves no core dump, and other
/// processes of its user cannot ptrace it or read its memory through /proc. Not before the
/// sandbox is cloned: a child forked from a non-dumpable process has root-owned /proc files
/// until it execs, and an unprivileged supervisor could no longer write its uid_map.
fn keep_out_of_dumps() -> Result<(), Error> {
    nix::sys::prctl::set_dumpable(false).map_err(|errno| Error::State {
        action: "make non-dumpable (prctl PR_SET_DUMPABLE)",
        path: PathBuf::from("/proc/self"),
        source: errno.into(),
    })
}

/// The value, or an error naming the secret, its source and what to do.
fn read_value(spec: &SecretSpec) -> Result<Zeroizing<String>, Error> {
    source::read(&spec.source).map_err(|why| unavailable(spec, why))
}

fn new_placeholder(spec: &SecretSpec, value: &str, random: &mut Random) -> Result<String, Error> {
    placeholder::make(value, random)
        .map_err(urandom)?
        .ok_or_else(|| {
            unavailable(
                spec,
                "it has no letter or digit after its prefix, so a placeholder of its shape would be the value itself — use the real credential".into(),
            )
        })
}

fn unavailable(spec: &SecretSpec, why: String) -> Error {
    Error::SecretUnavailable {
        secret: spec.name.clone(),
        from: spec.source.to_string(),
        why,
    }
}

fn urandom(source: std::io::Error) -> Error {
    Error::State {
        action: "read",
        path: PathBuf::from("/dev/urandom"),
        source,
    }
}

fn load_placeholders(session_dir: &Path) -> Result<BTreeMap<String, String>, Error> {
    let path = session_dir.join(PLACEHOLDERS_FILE);
    match std::fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|e| Error::StateUntrusted {
            path,
            why: format!("it is not a map of secret names to placeholders ({e}) — discard the session with 'airlock discard'"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(source) => Err(Error::State {
            action: "read",
            path,
            source,
        }),
    }
}

/// Written whole or not at all, readable by this user only.
fn store_placeholders(
    session_dir: &Path,
    placeholders: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let path = session_dir.join(PLACEHOLDERS_FILE);
    let temp = session_dir.join(format!("{PLACEHOLDERS_FILE}.tmp"));
    let state = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::State {
            action,
            path,
            source,
        }
    };
    let mut text = serde_json::to_vec_pretty(placeholders)?;
    text.push(b'\n');
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(state("create", &temp))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(state("write", &temp))?;
    std::fs::rename(&temp, &path).map_err(state("replace", &path))
}

#[cfg(test)]
mod tests;
