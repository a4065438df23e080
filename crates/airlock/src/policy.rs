//! `airlock policy show|check|list`: a profile as runs apply it, whether a file is one, and the
//! profiles a run can name.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use airlock_core::{Profile, ProfileChoice};

use crate::shown::printable;

use crate::cli::{GlobalArgs, PolicyCheckArgs, PolicyListArgs, PolicyShowArgs};

/// Exit status of `policy check` for a file that is not a valid profile.
const EXIT_INVALID_PROFILE: u8 = 2;

pub fn show(global: &GlobalArgs, args: PolicyShowArgs) -> Result<ExitCode> {
    if args.starter {
        let name = args
            .profile
            .as_deref()
            .unwrap_or(airlock_core::DEFAULT_PROFILE_NAME);
        crate::shown::out!(text: airlock_core::starter_text(name)?);
        return Ok(ExitCode::SUCCESS);
    }
    let choice = match args.profile {
        Some(named) if named.contains('/') => ProfileChoice {
            name: None,
            file: Some(PathBuf::from(named)),
        },
        named => ProfileChoice {
            name: named,
            file: None,
        },
    };
    let profile = airlock_core::effective_profile(&crate::run::caller(global), &choice)?;
    if args.as_written {
        crate::shown::out!(text: airlock_core::profile_as_written(&profile)?);
        return Ok(ExitCode::SUCCESS);
    }
    let policy = airlock_core::profile_to_toml(&profile);
    if args.json {
        let shown = json!({
            "profile": profile.name,
            "source": profile.source,
            "from": airlock_core::profile_origin(&profile),
            "policy": policy,
        });
        crate::shown::out!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        crate::shown::out!("# profile {}, {}", profile.name, origin(&profile));
        crate::shown::out!("# every default filled in");
        crate::shown::out!(text: policy.to_string());
    }
    Ok(ExitCode::SUCCESS)
}

fn origin(profile: &Profile) -> String {
    match (&profile.source, airlock_core::profile_origin(profile)) {
        (Some(path), _) => format!("from {}", path.display()),
        (None, airlock_core::ProfileOrigin::Starter) => format!(
            "a starter shipped with airlock (no file; to change it, copy it: airlock policy show {} --starter > ~/.config/airlock/profiles/{}.toml)",
            profile.name, profile.name
        ),
        (None, _) => "built in (no file)".into(),
    }
}

pub fn list(global: &GlobalArgs, args: PolicyListArgs) -> Result<ExitCode> {
    let listed = airlock_core::list_profiles(&crate::run::caller(global));
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 3]> = listed
        .iter()
        .map(|profile| {
            let from = match &profile.from {
                airlock_core::ListedFrom::File { path } => path.display().to_string(),
                airlock_core::ListedFrom::Starter => "starter, built into airlock".into(),
                airlock_core::ListedFrom::Builtin => "built in".into(),
            };
            let mut about = profile.about.clone().unwrap_or_default();
            if !profile.used {
                about = format!("(hidden by the one above) {about}");
            }
            [
                printable(&profile.name),
                printable(&from),
                about.trim_end().to_string(),
            ]
        })
        .collect();
    crate::shown::out!(text: crate::shown::table(["NAME", "FROM", "WHAT"], &rows));
    Ok(ExitCode::SUCCESS)
}

pub fn check(args: PolicyCheckArgs) -> Result<ExitCode> {
    let file = args.file.display().to_string();
    match airlock_core::check_profile_file(&args.file) {
        Ok(profile) => {
            let secrets = profile.secrets.len();
            // Valid all the same: the rules hold where the gate reads, and these say where not.
            let mut warnings = profile.http_rule_gaps();
            warnings.extend(profile.ask_notes());
            warnings.extend(profile.secret_notes());
            for warning in &warnings {
                crate::shown::note!("airlock: warning: {file}: {warning}");
            }
            if args.json {
                let said = json!({ "file": file, "valid": true, "profile": profile.name, "secrets": secrets, "warnings": warnings });
                crate::shown::out!("{said}");
            } else {
                let noun = if secrets == 1 { "secret" } else { "secrets" };
                crate::shown::out!("{file}: valid (profile {}, {secrets} {noun})", profile.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err @ airlock_core::Error::Policy(_)) => {
            // The message names the file, the line and column, and what to do.
            crate::shown::note!("airlock: {err}");
            if args.json {
                let said = json!({ "file": file, "valid": false, "error": err.to_string(), "code": err.code().0 });
                crate::shown::out!("{said}");
            }
            Ok(ExitCode::from(EXIT_INVALID_PROFILE))
        }
        Err(err) => Err(err.into()),
    }
}
