//! The kill switch as a front end asks for it: which sandboxes a request names, what it may do
//! to them, and what the switches say. The mechanics are in [`crate::control`].

use std::path::Path;

use serde::Serialize;

use crate::caller::Caller;
use crate::control::{self, Acted, Action, Running, Switches, Target};
use crate::error::Error;

/// Which running sandboxes a request names: everything, a profile's, a pid's, or a session's
/// (by id or name), in that order of precedence.
#[derive(Debug, Clone, Default)]
pub struct TargetChoice {
    pub all: bool,
    pub profile: Option<String>,
    pub pid: Option<u32>,
    pub session: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ControlRequest {
    pub action: Action,
    pub target: TargetChoice,
    /// With [`Action::Kill`]: cut the sandboxes' network instead, leaving their processes.
    pub network_only: bool,
    /// Why, for the audit log.
    pub reason: Option<String>,
}

/// What was done, to which sandboxes.
#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    #[serde(serialize_with = "action_name")]
    pub action: Action,
    pub sandboxes: Vec<Acted>,
    pub failed: usize,
}

fn action_name<S: serde::Serializer>(action: &Action, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_str(action.name())
}

impl ControlReport {
    fn of(action: Action, sandboxes: Vec<Acted>) -> ControlReport {
        let failed = sandboxes.iter().filter(|act| act.error.is_some()).count();
        ControlReport {
            action,
            sandboxes,
            failed,
        }
    }
}

/// A session named by id or name. An id of a session whose record is gone still matches while a
/// sandbox of it runs; anything else is a mistake (a typo), not "nothing to do".
fn target(caller: &Caller, state_dir: &Path, choice: &TargetChoice) -> Result<Target, Error> {
    if caller.grant.is_some() {
        return target_within_grant(caller, state_dir, choice);
    }
    if choice.all {
        return Ok(Target::All);
    }
    if let Some(profile) = &choice.profile {
        return Ok(Target::Profile(profile.clone()));
    }
    if let Some(pid) = choice.pid {
        return Ok(Target::Pid(pid));
    }
    let name = choice.session.as_deref().unwrap_or_default();
    match caller.find_session(state_dir, name) {
        Ok(session) => Ok(Target::Session(session.id)),
        Err(_)
            if control::running(state_dir)
                .iter()
                .any(|run| run.session.as_deref() == Some(name)) =>
        {
            Ok(Target::Session(name.to_string()))
        }
        Err(err) => Err(err),
    }
}

/// With a token, what a request names lies within its profile: "all" is its profile's sandboxes,
/// a pid must be one of them, a session one the token reaches.
fn target_within_grant(
    caller: &Caller,
    state_dir: &Path,
    choice: &TargetChoice,
) -> Result<Target, Error> {
    if choice.all || choice.profile.is_some() {
        let profile = caller.profile_scope(choice.profile.as_deref())?;
        return Ok(Target::Profile(profile.unwrap_or_default()));
    }
    if let Some(pid) = choice.pid {
        let profile = caller.profile_scope(None)?.unwrap_or_default();
        let theirs = control::running(state_dir).into_iter().any(|run| {
            (run.sandbox.pid == pid as i32 || run.supervisor == pid) && run.profile != profile
        });
        if theirs {
            return Err(Error::OutsideGrant {
                what: format!("act on pid {pid}: it runs another profile"),
            });
        }
        return Ok(Target::Pid(pid));
    }
    let name = choice.session.as_deref().unwrap_or_default();
    Ok(Target::Session(caller.find_session(state_dir, name)?.id))
}

/// Kill, pause, resume or cut the network of the sandboxes the request names. A refusal is
/// recorded in the audit log (`kill.refused`, `pause.refused`, `resume.refused`).
pub fn act(caller: &Caller, request: &ControlRequest) -> Result<ControlReport, Error> {
    let refusal = format!("{}.refused", request.action.name());
    let session = request.target.session.as_deref();
    crate::refusal::audited(caller, &refusal, session, || act_on_target(caller, request))
}

/// SECURITY: a reason is shown to others as it was written (the run it killed prints it on its
/// terminal, `status` and every refusal too): a control character would be a terminal escape
/// sequence in someone else's terminal.
fn check_reason(reason: &str) -> Result<(), Error> {
    if reason.chars().any(char::is_control) {
        return Err(Error::Argument {
            arg: "--reason".into(),
            why: "holds a control character (a newline, tab or terminal escape): say it in one \
                  line of printable text"
                .into(),
        });
    }
    Ok(())
}

fn act_on_target(caller: &Caller, request: &ControlRequest) -> Result<ControlReport, Error> {
    caller.must_be_operator(&format!("{} sandboxes", request.action.name()))?;
    if let Some(reason) = &request.reason {
        check_reason(reason)?;
    }
    let state_dir = caller.state_dir()?;
    let action = match request.action {
        Action::Kill if request.network_only => Action::CutNetwork,
        other if request.network_only => {
            return Err(Error::Argument {
                arg: "--network".into(),
                why: format!(
                    "goes with kill only (it cuts the network); not with {}",
                    other.name()
                ),
            })
        }
        other => other,
    };
    let target = target(caller, &state_dir, &request.target)?;
    let acted = control::act(
        &state_dir,
        &crate::audit::log_for(caller, &state_dir),
        action,
        &target,
        request.reason.as_deref(),
    )?;
    Ok(ControlReport::of(action, acted))
}

/// Disable airlock for a profile (or entirely): every entry point refuses it from now on, and
/// its running sandboxes are killed. The reason is required: everyone refused reads it. A
/// refusal is recorded in the audit log (`disable.refused`).
pub fn disable(
    caller: &Caller,
    profile: Option<&str>,
    reason: &str,
) -> Result<ControlReport, Error> {
    crate::refusal::audited(caller, "disable.refused", None, || {
        switch_off(caller, profile, reason)
    })
}

fn switch_off(
    caller: &Caller,
    profile: Option<&str>,
    reason: &str,
) -> Result<ControlReport, Error> {
    caller.must_be_operator("disable airlock")?;
    if reason.trim().is_empty() {
        return Err(Error::Argument {
            arg: "--reason".into(),
            why: "is empty: say why (everyone who is refused reads it)".into(),
        });
    }
    check_reason(reason)?;
    let profile = caller.profile_scope(profile)?;
    let state_dir = caller.state_dir()?;
    let acted = control::disable(
        &state_dir,
        &crate::audit::log_for(caller, &state_dir),
        profile.as_deref(),
        reason,
    )?;
    Ok(ControlReport::of(Action::Kill, acted))
}

#[derive(Debug, Clone, Serialize)]
pub struct EnableReport {
    pub profile: Option<String>,
    /// The switch that was lifted had been on.
    pub was_on: bool,
    /// Another switch still refuses this scope (the one for everything, say): what it says.
    pub still_disabled: Option<String>,
}

/// Lift the switch for a profile (or the one for everything). A refusal is recorded in the
/// audit log (`enable.refused`).
pub fn enable(caller: &Caller, profile: Option<&str>) -> Result<EnableReport, Error> {
    crate::refusal::audited(caller, "enable.refused", None, || {
        switch_on(caller, profile)
    })
}

fn switch_on(caller: &Caller, profile: Option<&str>) -> Result<EnableReport, Error> {
    caller.must_be_operator("enable airlock")?;
    let profile = caller.profile_scope(profile)?;
    let profile = profile.as_deref();
    let state_dir = caller.state_dir()?;
    let was_on = control::switches(&state_dir).map_or(true, |s| match profile {
        Some(name) => s.profiles.contains_key(name),
        None => s.all.is_some(),
    });
    control::enable(
        &state_dir,
        &crate::audit::log_for(caller, &state_dir),
        profile,
    )?;
    let still = control::check_enabled(&state_dir, profile.unwrap_or(""));
    Ok(EnableReport {
        profile: profile.map(str::to_string),
        was_on,
        still_disabled: still.err().map(|e| e.to_string()),
    })
}

/// The switches and the running sandboxes. What cannot be read is said, never reported as
/// "enabled" or "nothing running".
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub switches: Option<Switches>,
    pub switches_error: Option<String>,
    pub running: Vec<Listed>,
    pub running_error: Option<String>,
}

/// A running sandbox, as the status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    #[serde(flatten)]
    pub run: Running,
    pub paused: bool,
}

impl StatusReport {
    /// Everything could be read.
    pub fn is_complete(&self) -> bool {
        self.switches_error.is_none() && self.running_error.is_none()
    }
}

pub fn status(caller: &Caller) -> Result<StatusReport, Error> {
    let state_dir = caller.state_dir()?;
    let switches = control::switches(&state_dir);
    let registry = state_dir.join("running");
    let running_error = match std::fs::read_dir(&registry) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Some(format!("cannot read {}: {e}", registry.display()))
        }
        _ => None,
    };
    let scope = caller.profile_scope(None)?;
    let running = control::running(&state_dir)
        .into_iter()
        .filter(|run| scope.as_ref().is_none_or(|p| *p == run.profile))
        .filter(|run| caller.sees_run_of(run.token.as_deref()))
        .map(|run| Listed {
            paused: run.sandbox.is_paused(),
            run,
        })
        .collect();
    let (switches, switches_error) = match switches {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(StatusReport {
        switches,
        switches_error,
        running,
        running_error,
    })
}
