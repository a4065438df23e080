//! `airlock policy show|check`: a profile as runs apply it, and whether a file is one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use airlock_core::{Profile, ProfileChoice};

use crate::cli::{GlobalArgs, PolicyCheckArgs, PolicyShowArgs};

/// Exit status of `policy check` for a file that is not a valid profile.
const EXIT_INVALID_PROFILE: u8 = 2;

pub fn show(global: &GlobalArgs, args: PolicyShowArgs) -> Result<ExitCode> {
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
    let policy = airlock_core::profile_to_toml(&profile);
    if args.json {
        let shown = json!({
            "profile": profile.name,
            "source": profile.source,
            "policy": policy,
        });
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        println!("# profile {}, {}", profile.name, origin(&profile));
        println!("# every default filled in");
        print!("{policy}");
    }
    Ok(ExitCode::SUCCESS)
}

fn origin(profile: &Profile) -> String {
    match &profile.source {
        Some(path) => format!("from {}", path.display()),
        None => "built in (no file)".into(),
    }
}

pub fn check(args: PolicyCheckArgs) -> Result<ExitCode> {
    let file = args.file.display().to_string();
    match airlock_core::check_profile_file(&args.file) {
        Ok(profile) => {
            let secrets = profile.secrets.len();
            // Valid all the same: the rules hold where the gate reads, and these say where not.
            let warnings = profile.http_rule_gaps();
            for warning in &warnings {
                crate::shown::note!("airlock: warning: {file}: {warning}");
            }
            if args.json {
                let said = json!({ "file": file, "valid": true, "profile": profile.name, "secrets": secrets, "warnings": warnings });
                println!("{said}");
            } else {
                let noun = if secrets == 1 { "secret" } else { "secrets" };
                println!("{file}: valid (profile {}, {secrets} {noun})", profile.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err @ airlock_core::Error::Policy(_)) => {
            // The message names the file, the line and column, and what to do.
            crate::shown::note!("airlock: {err}");
            if args.json {
                let said = json!({ "file": file, "valid": false, "error": err.to_string(), "code": err.code().0 });
                println!("{said}");
            }
            Ok(ExitCode::from(EXIT_INVALID_PROFILE))
        }
        Err(err) => Err(err.into()),
    }
}
