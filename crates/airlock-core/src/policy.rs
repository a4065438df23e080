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
