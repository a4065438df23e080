//! `airlock policy show|check`: a profile read as a run would read it, for a person to look at.
//! Nothing is enforced and no secret's source is read: a profile holds references to values,
//! never values.

use std::path::Path;

use airlock_policy::Profile;

use crate::caller::{Caller, ProfileChoice};
use crate::error::Error;

/// The profile `choice` names (by name, from where policy lives; or a file), every default
/// filled in. With a token, only its own profile.
pub fn effective_profile(caller: &Caller, choice: &ProfileChoice) -> Result<Profile, Error> {
    let chosen = choice.resolve(caller)?;
    Ok(match &chosen.file {
        Some(file) => airlock_policy::load_file(file)?,
        None => airlock_policy::load_named(&chosen.name, &caller.profile_search_dirs())?,
    })
}

/// `path` judged as a profile, as a run would judge it: parsed and validated, nothing run.
pub fn check_profile_file(path: &Path) -> Result<Profile, Error> {
    Ok(airlock_policy::load_file(path)?)
}

/// What only an operator may ask, in the words of the refusal.
pub(crate) const LEARNING: &str =
    "run a learning run (airlock learn opens the network to every public host)";

/// What `airlock learn` gives: the run's report, and the profile proposed from what it used.
#[derive(Debug)]
pub struct Learned {
    pub report: crate::RunReport,
    /// The proposed profile's text (see [`airlock_policy::learn::propose`]).
    pub proposal: String,
    /// The proposal read back, as a run would read it.
    pub profile: Profile,
    /// What was learned, a line each, for the person: the hosts reached, the limits proposed.
    pub summary: Vec<String>,
}

/// A learning run of `request`'s command (see [`crate::RunRequest::learn`]) and the profile
/// proposed from it: the request's profile with the network the command used and limits with
/// headroom; or, with `extend`, that profile (learned before) with this run's needs added.
/// The proposal is validated as a run would read it.
pub fn learn(
    caller: &Caller,
    mut request: crate::RunRequest,
    extend: Option<&Path>,
) -> Result<Learned, Error> {
    request.learn = true;
    // Extending a profile learned before: its layers are the run's, unless another is named (the
    // built-in default's would show what that profile hides, with the network open).
    if let (Some(file), false) = (extend, request.profile.is_given()) {
        request.profile.file = Some(file.to_path_buf());
    }
    // Before any file is read for it (the run asks again, as for any run).
    crate::refusal::audited(caller, "run.refused", None, || {
        caller.must_be_operator(LEARNING)
    })?;
    let base = effective_profile(caller, &request.profile)?;
    let extended = extend.map(check_profile_file).transpose()?;
    let command: Vec<String> = request.argv.iter().map(crate::audit::text).collect();
    let report = crate::run(caller, request)?;
    let observed = report.learned.clone().unwrap_or_default();
    let when = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let origin = airlock_policy::learn::Origin {
        base: &base,
        command: &command.join(" "),
        when: &when,
    };
    let proposal = airlock_policy::learn::propose(&origin, &observed, extended.as_ref());
    let name = extend
        .and_then(|p| p.file_stem())
        .map_or_else(|| "learned".into(), |s| s.to_string_lossy().into_owned());
    let profile = airlock_policy::parse_profile(&proposal, &name, Path::new("(learned)"))?;
    let hosts: Vec<String> = observed
        .destinations
        .keys()
        .map(|(host, port)| airlock_policy::learn::destination(host, *port))
        .collect();
    let mut summary = vec![match hosts.len() {
        0 => "the command reached no host".to_string(),
        n => format!(
            "{} reached: {}",
            crate::counted(n as u64, "host", "hosts"),
            hosts.join(", ")
        ),
    }];
    if observed.unlearned > 0 {
        summary.push(format!(
            "{} to destinations past the {} learned: not allowed (learn from a narrower command)",
            crate::counted(observed.unlearned, "connection", "connections"),
            airlock_policy::learn::MAX_DESTINATIONS
        ));
    }
    for (host, requests) in &observed.requests {
        let listed: Vec<&str> = requests.iter().map(String::as_str).collect();
        summary.push(format!(
            "requests to {host} (its [[network.http]] rules): {}",
            listed.join(", ")
        ));
    }
    summary.extend(airlock_policy::learn::describe_limits(
        &observed,
        &profile.limits,
    ));
    Ok(Learned {
        report,
        proposal,
        profile,
        summary,
    })
}

/// Every profile a run can name, where each comes from, and which a file of the same name
/// earlier in the search hides: the caller's search directories, then the starters shipped
/// with airlock, then the built-in default.
pub fn list_profiles(caller: &Caller) -> Vec<airlock_policy::Listed> {
    airlock_policy::list_profiles(&caller.profile_search_dirs())
}

/// The text of the starter profile `name` shipped with airlock, whatever file of that name
/// hides it from runs: what a copy of it starts from.
pub fn starter_text(name: &str) -> Result<&'static str, Error> {
    Ok(airlock_policy::find_starter(name)?.text)
}

/// Where a loaded profile comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileOrigin {
    File,
    Starter,
    Builtin,
}

/// Where `profile` (as loaded) comes from.
pub fn profile_origin(profile: &Profile) -> ProfileOrigin {
    match (&profile.source, airlock_policy::starter(&profile.name)) {
        (Some(_), _) => ProfileOrigin::File,
        (None, Some(_)) => ProfileOrigin::Starter,
        (None, None) => ProfileOrigin::Builtin,
    }
}

/// The profile as it is written, comments and all: its file's text, a starter's text, or for
/// the built-in default its keys with every default (it has no text).
pub fn profile_as_written(profile: &Profile) -> Result<String, Error> {
    Ok(
        match (&profile.source, airlock_policy::starter(&profile.name)) {
            (Some(path), _) => std::fs::read_to_string(path).map_err(|error| {
                airlock_policy::PolicyError::Unreadable {
                    path: path.clone(),
                    error,
                }
            })?,
            (None, Some(starter)) => starter.text.to_string(),
            (None, None) => format!(
                "# the built-in default profile: it has no file; these are its keys\n{}",
                airlock_policy::to_toml(profile)
            ),
        },
    )
}
