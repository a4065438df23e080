//! `airlock check`: what this machine can enforce, and what `run` will do about what it cannot.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;

use airlock_core::{check_limits, LimitCheck, RunRequest, Way, DEFAULT_ROOT_SANDBOX_ID};
use airlock_jail::probe::{probe_layers, LayerReport};

use crate::cli::{CheckArgs, GlobalArgs};

/// Exit status when a required layer is missing.
const EXIT_LAYER_MISSING: u8 = 3;
/// Exit status when `run` works here with less than full protection: an optional layer is
/// partial, or a limit a profile may name is refused.
const EXIT_PARTIAL: u8 = 4;

/// How one line of the report stands. The verdict is the worst of them ([`protection`]), and each
/// line's mark is its standing: the closing line cannot say more than the lines above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    Ok,
    /// Missing but not needed: `run` works with a fallback (rlimits for cgroups), or refuses
    /// only a profile that names the limit.
    Partial,
    /// Missing; `run` refuses unless --allow-degraded accepts it.
    Degraded,
    /// Missing and required: `run` refuses.
    Missing,
}

impl Standing {
    fn of_layer(layer: &LayerReport) -> Standing {
        match (layer.available, layer.optional, layer.degradable_as) {
            (true, _, _) => Standing::Ok,
            (false, true, _) => Standing::Partial,
            (false, false, Some(_)) => Standing::Degraded,
            (false, false, None) => Standing::Missing,
        }
    }

    fn of_limit(limit: &LimitCheck) -> Standing {
        if limit.enforced_by == "refused" {
            Standing::Partial
        } else {
            Standing::Ok
        }
    }

    /// The mark at the start of a layer's line.
    fn mark(self) -> &'static str {
        match self {
            Standing::Ok => "ok     ",
            Standing::Partial => "partial",
            Standing::Degraded | Standing::Missing => "MISSING",
        }
    }
}

/// What `run` can promise here, from every line of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Protection {
    /// Every layer there, every limit enforced.
    Full,
    /// `run` works, with less on the lines marked partial (layers) or refused (limits).
    Partial,
    /// A layer is missing that --allow-degraded can accept.
    Degraded,
    /// A required layer is missing: run refuses.
    None,
}

fn protection(layers: &[LayerReport], limits: &[LimitCheck]) -> Protection {
    let worst = layers
        .iter()
        .map(Standing::of_layer)
        .chain(limits.iter().map(Standing::of_limit))
        .max()
        .unwrap_or(Standing::Ok);
    match worst {
        Standing::Ok => Protection::Full,
        Standing::Partial => Protection::Partial,
        Standing::Degraded => Protection::Degraded,
        Standing::Missing => Protection::None,
    }
}

impl Protection {
    fn exit_code(self) -> ExitCode {
        match self {
            Protection::Full => ExitCode::SUCCESS,
            Protection::Partial => ExitCode::from(EXIT_PARTIAL),
            Protection::Degraded | Protection::None => ExitCode::from(EXIT_LAYER_MISSING),
        }
    }
}

#[derive(Serialize)]
struct Report {
    /// "full", "partial" (run works, with less on a line marked partial or refused), "degraded"
    /// (a layer is missing that --allow-degraded can accept) or "none" (a required layer is
    /// missing: run refuses): the worst of the lines.
    protection: Protection,
    uid_mapping: String,
    /// Whether the caller's supplementary groups are in force inside (see [`groups`]).
    supplementary_groups: String,
    layers: Vec<LayerReport>,
    /// Each limit and how it is enforced here.
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
    let limits = check_limits(&state, way);
    let report = Report {
        protection: protection(&layers, &limits),
        uid_mapping: uid_mapping(way),
        supplementary_groups: groups(way),
        container: airlock_jail::container::detect().map(|engine| advice(engine, &layers)),
        layers,
        limits,
    };
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::shown::out!(text: table(&report));
    }
    Ok(report.protection.exit_code())
}

fn all_required_available(layers: &[LayerReport]) -> bool {
    layers
        .iter()
        .all(|l| l.available || l.optional || l.degradable_as.is_some())
}

/// Each probe above asks one thing alone; this is `airlock run -- true` itself, every step of it
/// with the default profile, in a throwaway workspace: `check` never promises what `run` cannot
/// do (a container's filters refuse things no probe foresaw). Recorded in the audit log as any
/// run is.
/// The `--allow-degraded` flags that would accept the layers missing here.
fn degradable_missing(layers: &[LayerReport]) -> Vec<String> {
    layers
        .iter()
        .filter(|l| !l.available)
        .filter_map(|l| l.degradable_as)
        .map(str::to_string)
        .collect()
}

/// With `accepted`, the layers missing that --allow-degraded may accept: the run tried is the
/// one the report offers.
fn trial_run(global: &GlobalArgs, accepted: Vec<String>) -> LayerReport {
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
    LayerReport {
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

/// The caller's supplementary groups inside the sandbox. As root they are dropped (setgroups).
/// In a user namespace an unprivileged process made, the kernel refuses setgroups (it must be
/// denied before the gid map is written: dropping a group could open a file a group is denied),
/// so the caller's groups stay in force for the sandbox's permission checks, on every file it
/// sees: a limit, said here and in docs/security.md.
fn groups(way: Way) -> String {
    if way.is_rootful() {
        return "none inside: the sandbox's uid has no supplementary group (setgroups)".into();
    }
    let primary = nix::unistd::getegid();
    let extra: Vec<String> = nix::unistd::getgroups()
        .unwrap_or_default()
        .into_iter()
        .filter(|gid| *gid != primary)
        .map(|gid| match nix::unistd::Group::from_gid(gid) {
            Ok(Some(group)) => format!("{} ({gid})", group.name),
            _ => gid.to_string(),
        })
        .collect();
    if extra.is_empty() {
        return "none: you have no supplementary group to carry in".into();
    }
    format!(
        "kept: yours ({}) stay in force inside, where the kernel lets no unprivileged process \
         drop them: a file in a bind that one of them may read, the sandbox may read too. Run \
         airlock as root, from a login without them, or keep such files out of binds",
        extra.join(", ")
    )
}

/// Inside a container: the layers it blocks, and what to do about them for `engine`.
fn advice(engine: String, layers: &[LayerReport]) -> ContainerAdvice {
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

/// The report as a person reads it: a line per layer and per limit, then the verdict.
fn table(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for layer in &report.layers {
        let mark = Standing::of_layer(layer).mark();
        let _ = writeln!(out, "{mark}  {:<18} {}", layer.name, layer.detail);
        for line in layer.fix.iter().flat_map(|fix| fix.lines()) {
            let _ = writeln!(out, "{:<28}{line}", "");
        }
    }
    let _ = writeln!(out, "         {:<18} {}", "uid mapping", report.uid_mapping);
    let _ = writeln!(
        out,
        "         {:<18} {}",
        "groups", report.supplementary_groups
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "limits ([limits] in a profile; how this host enforces each):"
    );
    for limit in &report.limits {
        let _ = writeln!(
            out,
            "{:<10} {:<28} {}",
            limit.enforced_by, limit.name, limit.how
        );
    }
    let _ = writeln!(out);
    if let Some(container) = &report.container {
        container_lines(&mut out, container);
    }
    let verdict = match report.protection {
        Protection::Full => {
            "protection: full — 'airlock run' enforces every layer and limit above.".to_string()
        }
        Protection::Partial => {
            "protection: partial — 'airlock run' works, with less than the full protection on \
             the lines marked partial or refused above (each says what stands in for it)."
                .to_string()
        }
        Protection::Degraded => format!(
            "protection: degraded — 'airlock run' refuses unless you accept it with --allow-degraded={}",
            degradable_missing(&report.layers).join(",")
        ),
        Protection::None => {
            "protection: none — 'airlock run' refuses: a required layer is missing (see above)."
                .to_string()
        }
    };
    let _ = writeln!(out, "{verdict}");
    out
}

fn container_lines(out: &mut String, container: &ContainerAdvice) {
    use std::fmt::Write as _;
    if container.blocked.is_empty() {
        let _ = writeln!(
            out,
            "inside a container ({}): airlock nests here.\n",
            container.engine
        );
        return;
    }
    let _ = writeln!(
        out,
        "inside a container ({}): it blocks {}.",
        container.engine,
        container.blocked.join(", ")
    );
    for way in &container.ways_forward {
        let _ = writeln!(out, "  - {way}");
    }
    let _ = writeln!(out);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(available: bool, optional: bool, degradable_as: Option<&'static str>) -> LayerReport {
        LayerReport {
            name: "layer",
            available,
            detail: "what it is".into(),
            degradable_as,
            optional,
            fix: None,
        }
    }

    fn limit(enforced_by: &'static str) -> LimitCheck {
        LimitCheck {
            name: "limit",
            enforced_by,
            how: "how".into(),
            degradable_as: None,
        }
    }

    /// Every mix of lines: the verdict is full exactly when no line says less, its exit status
    /// is 0 exactly then, and the printed verdict is the one computed.
    #[test]
    fn the_verdict_never_says_more_than_its_lines() {
        let layers = [
            layer(true, false, None),
            layer(false, true, None),
            layer(false, false, Some("landlock")),
            layer(false, false, None),
        ];
        let limits = [limit("kernel"), limit("supervisor"), limit("refused")];
        for mask in 0..(1u32 << (layers.len() + limits.len())) {
            let chosen = |i: usize| mask & (1 << i) != 0;
            let some_layers: Vec<LayerReport> = (0..layers.len())
                .filter(|&i| chosen(i))
                .map(|i| layers[i].clone())
                .collect();
            let some_limits: Vec<LimitCheck> = (0..limits.len())
                .filter(|&i| chosen(layers.len() + i))
                .map(|i| limits[i].clone())
                .collect();
            let report = Report {
                protection: protection(&some_layers, &some_limits),
                uid_mapping: "mapping".into(),
                supplementary_groups: "groups".into(),
                layers: some_layers,
                limits: some_limits,
                container: None,
            };
            let text = table(&report);
            let says_less = text.lines().any(|line| {
                line.starts_with("partial")
                    || line.starts_with("MISSING")
                    || line.starts_with("refused")
            });
            let verdict = text.lines().last().unwrap_or_default();
            assert_eq!(report.protection == Protection::Full, !says_less, "{text}");
            assert_eq!(
                verdict.starts_with("protection: full"),
                !says_less,
                "{text}"
            );
            assert_eq!(
                report.protection.exit_code() == ExitCode::SUCCESS,
                !says_less,
                "{text}"
            );
        }
    }

    #[test]
    fn the_worst_line_decides() {
        let partial = [layer(true, false, None), layer(false, true, None)];
        assert_eq!(
            protection(&partial, &[limit("kernel")]),
            Protection::Partial
        );
        assert_eq!(
            protection(&partial[..1], &[limit("refused")]),
            Protection::Partial
        );
        let degraded = [
            layer(false, true, None),
            layer(false, false, Some("landlock")),
        ];
        assert_eq!(protection(&degraded, &[]), Protection::Degraded);
        let none = [
            layer(false, false, Some("landlock")),
            layer(false, false, None),
        ];
        assert_eq!(protection(&none, &[limit("refused")]), Protection::None);
        assert_eq!(
            protection(&partial[..1], &[limit("kernel")]),
            Protection::Full
        );
    }
}
