//! `airlock check`: what this machine can enforce, and what `run` will do about what it cannot.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

use airlock_core::{check_limits, LimitCheck, DEFAULT_ROOT_SANDBOX_ID};
use airlock_jail::probe::{probe_layers, Layer};

use crate::cli::{CheckArgs, GlobalArgs};

/// Exit status when a required layer is missing.
const EXIT_LAYER_MISSING: u8 = 3;

#[derive(Serialize)]
struct Report {
    /// "full", "degraded" (a layer is missing that --allow-degraded can accept) or "none" (a
    /// required layer is missing: run refuses).
    protection: &'static str,
    uid_mapping: String,
    layers: Vec<Layer>,
    /// Each limit and how it is enforced here (does not change `protection`).
    limits: Vec<LimitCheck>,
}

pub fn check(global: &GlobalArgs, args: CheckArgs) -> Result<ExitCode> {
    let state = crate::run::state_dir(global)?;
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create the state directory {}", state.display()))?;
    let scratch = scratch_dir_in(&state)?;
    let layers = probe_layers(&scratch);
    let _ = remove_scratch(&scratch);
    let missing_required = layers
        .iter()
        .any(|l| !l.available && !l.optional && l.degradable_as.is_none());
    let missing_degradable = layers
        .iter()
        .any(|l| !l.available && l.degradable_as.is_some());
    let protection = if missing_required {
        "none"
    } else if missing_degradable {
        "degraded"
    } else {
        "full"
    };
    let uid = nix::unistd::geteuid();
    let uid_mapping = if uid.is_root() {
        format!("uid 1000 inside = host uid {DEFAULT_ROOT_SANDBOX_ID} (dedicated, unprivileged; --sandbox-uid to change)")
    } else {
        format!("uid 1000 inside = host uid {uid} (you)")
    };
    let report = Report {
        protection,
        uid_mapping,
        layers,
        limits: check_limits(&state),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if protection == "full" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_LAYER_MISSING)
    })
}

fn print_table(report: &Report) {
    for layer in &report.layers {
        let mark = match (layer.available, layer.optional) {
            (true, _) => "ok     ",
            (false, true) => "partial",
            (false, false) => "MISSING",
        };
        println!("{mark}  {:<18} {}", layer.name, layer.detail);
        for line in layer.fix.iter().flat_map(|fix| fix.lines()) {
            println!("{:<28}{line}", "");
        }
    }
    println!("         {:<18} {}", "uid mapping", report.uid_mapping);
    println!();
    println!("limits ([limits] in a profile; how this host enforces each):");
    for limit in &report.limits {
        println!("{:<10} {:<28} {}", limit.enforced_by, limit.name, limit.how);
    }
    println!();
    match report.protection {
        "full" => println!("protection: full — 'airlock run' enforces every layer above."),
        "degraded" => {
            let flags: Vec<&str> = report
                .layers
                .iter()
                .filter(|l| !l.available)
                .filter_map(|l| l.degradable_as)
                .collect();
            println!(
                "protection: degraded — 'airlock run' refuses unless you accept it with --allow-degraded={}",
                flags.join(",")
            );
        }
        _ => println!(
            "protection: none — 'airlock run' refuses: a required layer is missing (see above)."
        ),
    }
}

fn scratch_dir_in(state: &std::path::Path) -> Result<std::path::PathBuf> {
    let dir = state.join(format!("check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

fn remove_scratch(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // overlayfs leaves a mode-000 directory in its work dir.
    let _ = std::fs::set_permissions(
        dir.join("work/work"),
        std::fs::Permissions::from_mode(0o700),
    );
    std::fs::remove_dir_all(dir)
}
