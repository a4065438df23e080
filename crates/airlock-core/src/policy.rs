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
