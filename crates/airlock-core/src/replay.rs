//! `airlock policy replay`: the network attempts of past runs, decided again by a draft profile.
//! What the runs needed that the draft would refuse, what was refused that it would allow, and
//! which of its allow entries no attempt used: a profile change reviewed against what really
//! happened ("this change would have broken last week's builds").
//!
//! The attempts are the gate's own records (`net.dns`, `net.connect`, and the samples a
//! `net.suppressed` record counted), each decided by the same code the gate decides with
//! ([`airlock_policy::NetworkMode`]'s `may_resolve` and `decide`): a connection made to a name by
//! the name, one made to a bare address by the address. Each belongs to the run whose
//! `run.intent` the same airlock process wrote last for the same session.

mod attempt;
mod report;

use std::path::PathBuf;

use airlock_audit::Filter;
use airlock_policy::Profile;

use crate::caller::Caller;
use crate::error::Error;

pub use report::{Replay, ReplayedDestination, ReplayedRun, RunBroken};

/// Which records to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayRequest {
    /// The runs of this profile (None: the draft's own name).
    pub profile: Option<String>,
    /// Only this session's runs (its id, or its name in the state directory's log).
    pub session: Option<String>,
    /// Only attempts at or after this time (RFC 3339 UTC, as records carry it).
    pub since: Option<String>,
    /// A copy of a log (`airlock log --json`'s output, or an `audit.log`) instead of the state
    /// directory's log.
    pub log: Option<PathBuf>,
}

/// The records `request` names, replayed against `draft`'s network.
pub fn replay(caller: &Caller, draft: &Profile, request: ReplayRequest) -> Result<Replay, Error> {
    let profile = request.profile.unwrap_or_else(|| draft.name.clone());
    // Every run's intent is read, whatever the time: an attempt after `since` may belong to a
    // run that started before it. `since` is applied to the attempts.
    let filter = Filter {
        session: request.session,
        profile: Some(profile.clone()),
        since: None,
        actions: vec!["run.intent".into(), "run.learn".into(), "net".into()],
        denied: false,
        token: None,
    };
    let (mut records, filter) = match &request.log {
        Some(path) => (airlock_audit::Records::exported(path)?, filter),
        None => crate::audit::records(caller, filter)?,
    };
    let mut replaying = report::Replaying::new(&draft.network, request.since);
    while let Some(record) = records.next_matching(&filter)? {
        replaying.add(&record);
    }
    Ok(replaying.finish(&draft.name, &profile))
}
