//! `airlock check`: what this machine can enforce, and what `run` will do about what it cannot.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

use airlock_core::{check_limits, LimitCheck, RunRequest, Way, DEFAULT_ROOT_SANDBOX_ID};
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
    /// Inside a container: what it blocks and the ways forward.
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<ContainerAdvice>,
}

/// What `check` says inside a container (see docs/containers.md).
#[derive(Serialize)]
struct ContainerAdvice {
    /// The engine: "podman", "docker", or what the `container` variable names.
    engine: String,
    /// The layers the container keeps airlock from, by name.
    blocked: Vec<&'static str>,
    /// The ways forward, the recommended one first; empty when nothing is blocked.
    ways_forward: Vec<String>,
}

pub fn check(global: &GlobalArgs, args: CheckArgs) -> Result<ExitCode> {
    let state = crate::run::state_dir(global)?;
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create the state directory {}", state.display()))?;
    // The way `run` would take, as core decides it for a request of this process.
    let way = crate::run::caller(global).way;
    let scratch = scratch_dir_in(&state)?;
    let mut layers = probe_layers(&scratch, way);
    let _ = remove_scratch(&scratch);
    if all_required_available(&layers) {
        let accepted = degradable_missing(&layers);
        layers.push(trial_run(global, accepted));
    }
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
    let report = Report {
        protection,
        uid_mapping: uid_mapping(way),
        container: airlock_jail::container::detect().map(|engine| advice(engine, &layers)),
        layers,
        limits: check_limits(&state, way),
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

fn all_required_available(layers: &[Layer]) -> bool {
    layers
        .iter()
        .all(|l| l.available || l.optional || l.degradable_as.is_some())
}

/// Each probe above asks one thing alone; this is `airlock run -- true` itself, every step of it
/// with the default profile, in a throwaway workspace: `check` never promises what `run` cannot
/// do (a container's filters refuse things no probe foresaw). Recorded in the audit log as any
/// run is.
/// The `--allow-degraded` flags that would accept the layers missing here.
fn degradable_missing(layers: &[Layer]) -> Vec<String> {
    layers
        .iter()
        .filter(|l| !l.available)
        .filter_map(|l| l.degradable_as)
        .map(str::to_string)
        .collect()
}

/// With `accepted`, the layers missing that --allow-degraded may accept: the run tried is the
/// one the report offers.
fn trial_run(global: &GlobalArgs, accepted: Vec<String>) -> Layer {
    let tried = match accepted.as_slice() {
        [] => "'airlock run -- true'".to_string(),
        flags => format!("'airlock run --allow-degraded={} -- true'", flags.join(",")),
    };
    let failure = match trial_workspace() {
        Ok(workspace) => {
            let request = RunRequest {
                argv: vec!["true".into()],
                workspace: Some(workspace.clone()),
                limit_output: true,
                env: Some(Vec::new()),
                allow_degraded: accepted,
                ..RunRequest::default()
            };
            let outcome = airlock_core::run(&crate::run::caller(global), request);
            let _ = std::fs::remove_dir(&workspace);
            match outcome {
                Ok(report) if report.exit_status() == 0 => None,
                Ok(report) => Some(format!("`true` ended with status {}", report.exit_status())),
                Err(err) => Some(err.to_string()),
            }
        }
        Err(err) => Some(format!("cannot make its workspace: {err}")),
    };
    Layer {
        name: "trial run",
        available: failure.is_none(),
        detail: match failure {
            None => format!("{tried} ran: the layers above hold together"),
            Some(why) => format!("{tried} failed, so run refuses here: {why}"),
        },
        degradable_as: None,
        optional: false,
        fix: None,
    }
}

/// An empty directory of this user's, outside the state directory and any home (where no
/// workspace may be).
fn trial_workspace() -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("airlock-check-{}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

fn uid_mapping(way: Way) -> String {
    let uid = nix::unistd::geteuid();
    if way.is_rootful() {
        format!("uid 1000 inside = host uid {DEFAULT_ROOT_SANDBOX_ID} (dedicated, unprivileged; --sandbox-uid to change)")
    } else if airlock_jail::privilege::is_hosts_root() {
        "none: 'airlock run' refuses the host's root without CAP_SYS_ADMIN (a rootful \
         container's root): the sandbox would be the host's uid 0; run airlock as an \
         unprivileged user or as a user namespace's root (docs/containers.md)"
            .into()
    } else if uid.is_root() {
        "uid 1000 inside = uid 0, this user namespace's root (another uid on the host): without \
         CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID and CAP_SETGID on the host airlock runs as for \
         an unprivileged user; the sandbox has no capabilities, and Landlock is required"
            .into()
    } else {
        format!("uid 1000 inside = host uid {uid} (you)")
    }
}

/// Inside a container: the layers it blocks, and what to do about them for `engine`.
fn advice(engine: String, layers: &[Layer]) -> ContainerAdvice {
    let blocked: Vec<&'static str> = layers
        .iter()
        .filter(|l| !l.available && !l.optional)
        .map(|l| l.name)
        .collect();
    let ways_forward = if blocked.is_empty() {
        Vec::new()
    } else {
        vec![
            "recommended: run 'airlock serve' on the host and mount the directory of its socket \
             into this container (-v /run/airlock:/run/airlock): each request runs in a sandbox \
             on the host (docs/containers.md has a compose file)"
                .into(),
            format!("or let airlock nest here: {}", nesting_options(&engine)),
        ]
    };
    ContainerAdvice {
        engine,
        blocked,
        ways_forward,
    }
}

/// The container options that let airlock build its sandbox inside (docs/containers.md says
/// what each gives up).
fn nesting_options(engine: &str) -> String {
    let options = match engine {
        "docker" => {
            "--security-opt seccomp=unconfined --security-opt systempaths=unconfined \
                     (and --security-opt apparmor=unconfined where the host has AppArmor)"
        }
        _ => "--security-opt unmask=/proc/*",
    };
    format!(
        "{options}, a volume or tmpfs for airlock's state directory, and airlock run as an \
         unprivileged user (--user) or in a user namespace (rootless, --userns=auto); what each \
         gives up: docs/containers.md"
    )
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
    if let Some(container) = &report.container {
        print_container(container);
    }
    match report.protection {
        "full" => println!("protection: full — 'airlock run' enforces every layer above."),
        "degraded" => {
            println!(
                "protection: degraded — 'airlock run' refuses unless you accept it with --allow-degraded={}",
                degradable_missing(&report.layers).join(",")
            );
        }
        _ => println!(
            "protection: none — 'airlock run' refuses: a required layer is missing (see above)."
        ),
    }
}

fn print_container(container: &ContainerAdvice) {
    if container.blocked.is_empty() {
        println!(
            "inside a container ({}): airlock nests here.",
            container.engine
        );
        println!();
        return;
    }
    println!(
        "inside a container ({}): it blocks {}.",
        container.engine,
        container.blocked.join(", ")
    );
    for way in &container.ways_forward {
        println!("  - {way}");
    }
    println!();
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
