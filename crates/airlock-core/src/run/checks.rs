//! The rules a run's request must meet before anything is built: where a workspace may be, and
//! which paths of a profile would open a hole in the sandbox.

use std::path::{Path, PathBuf};

use airlock_policy::Profile;

use crate::error::Error;

/// A profile's path refused, naming the profile as the person knows it (its file, or its name).
fn path_refused(profile: &Profile, path: &Path, why: String) -> Error {
    Error::ProfilePath {
        profile: profile
            .source
            .as_ref()
            .map_or_else(|| profile.name.clone(), |p| p.display().to_string()),
        path: path.to_path_buf(),
        why,
    }
}

/// Paths of a profile that would open a hole in the sandbox, refused before anything is built
/// (`state_dir` canonical):
/// a read-write bind is written by sandboxes, so nothing else may be bound or hidden inside it
/// (a run could plant a symlink there for the next), it may not hold the workspace (writes would
/// bypass the session layer) nor airlock's state or policy; no bind may expose the state dir.
pub(super) fn check_profile_paths(
    profile: &Profile,
    workspace: &Path,
    state_dir: &Path,
    policy_dirs: &[PathBuf],
) -> Result<(), Error> {
    let fs = &profile.filesystem;
    let refuse = |path: &Path, why: String| Err(path_refused(profile, path, why));
    let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    let state = state_dir;
    for path in fs.read_only.iter().chain(&fs.read_write) {
        if let Some(why) = reaches_a_manager(path) {
            return refuse(path, why);
        }
        if overlaps(path, state) {
            return refuse(path, format!("it would show airlock's state directory {} to the sandbox; bind a narrower path", state.display()));
        }
        if path == workspace {
            return refuse(
                path,
                "it is the workspace, which every run sees already; remove it".into(),
            );
        }
    }
    // Compared by the directories they are, not by how they were named: a symlink on the way to
    // a policy directory must not hide it (one not made yet counts where it would be made).
    let policy_dirs: Vec<PathBuf> = match fs.read_write.is_empty() {
        true => Vec::new(),
        false => policy_dirs
            .iter()
            .map(|dir| canonical_prefix(dir))
            .collect(),
    };
    for rw in &fs.read_write {
        if overlaps(rw, workspace) {
            return refuse(rw, format!("a read-write bind may not contain or lie inside the workspace {}: writes would reach the host without going through the session; use a path outside it", workspace.display()));
        }
        if let Some(dir) = policy_dirs.iter().find(|dir| overlaps(rw, dir)) {
            return refuse(
                rw,
                format!(
                    "the sandbox could write airlock's policy in {}; bind a narrower path",
                    dir.display()
                ),
            );
        }
        for inner in fs.read_only.iter().chain(&fs.read_write).chain(&fs.hide) {
            if inner != rw && inner.starts_with(rw) {
                return refuse(inner, format!("it lies inside the read-write bind {}, where a run could replace it with a symlink for the next; list paths outside read-write binds", rw.display()));
            }
        }
    }
    Ok(())
}

/// Host paths whose bind would hand the sandbox something that runs commands, or changes limits,
/// outside it (`*` stands for any one name, a user's uid): the cgroup hierarchy (unprivileged, the
/// sandbox's uid is the caller's, which owns the caller's cgroups: its runs' limits, cgroup.kill),
/// systemd's managers and the buses (`systemd-run` starts anything, unconfined: as the user, or
/// as root where the sandbox's uid is the host's root, a container's root without
/// CAP_SYS_ADMIN), and container engines' sockets. A socket is reached through a read-only bind
/// too: connect() is no write to the filesystem. A list of what is known, not a proof that
/// nothing else is such a path: a profile's binds are the operator's to keep narrow.
const HANDS_OUT_A_MANAGER: &[&str] = &[
    "/sys/fs/cgroup",
    "/run/systemd/private",
    "/run/dbus/system_bus_socket",
    "/run/user/*/systemd",
    "/run/user/*/bus",
    "/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/user/*/podman",
    "/run/user/*/docker.sock",
];

/// Why a bind of `path` is refused, if it is one of [`HANDS_OUT_A_MANAGER`], inside one, or a
/// directory above one.
fn reaches_a_manager(path: &Path) -> Option<String> {
    let names = |path: &Path| -> Vec<std::ffi::OsString> {
        path.components()
            .filter(|part| matches!(part, std::path::Component::Normal(_)))
            .map(|part| part.as_os_str().to_os_string())
            .collect()
    };
    let bound = names(path);
    HANDS_OUT_A_MANAGER.iter().find_map(|pattern| {
        let pattern_names = names(Path::new(pattern));
        let overlaps = bound
            .iter()
            .zip(&pattern_names)
            .all(|(name, wanted)| wanted == "*" || name == wanted);
        overlaps.then(|| {
            format!(
                "it would hand the sandbox {pattern} ({}), through which a command runs or \
                 changes limits outside the sandbox (a socket is reached through a read-only \
                 bind too); bind a narrower path",
                if pattern.starts_with("/sys") {
                    "the cgroup hierarchy"
                } else {
                    "a manager's or a bus's socket"
                }
            )
        })
    })
}

/// Refuse a secret read from a file the sandbox sees (in the workspace or a bind of the profile,
/// not hidden): the sandbox would read the value itself, whatever its placeholder. Compared by
/// the files they are (a symlink to the workspace counts as the workspace).
pub(super) fn check_secret_files(profile: &Profile, workspace: &Path) -> Result<(), Error> {
    let fs = &profile.filesystem;
    let hidden: Vec<PathBuf> = fs.hide.iter().map(|p| canonical_prefix(p)).collect();
    let seen: Vec<PathBuf> = std::iter::once(workspace)
        .chain(fs.read_only.iter().map(PathBuf::as_path))
        .chain(fs.read_write.iter().map(PathBuf::as_path))
        .map(canonical_prefix)
        .collect();
    for spec in &profile.secrets {
        let airlock_policy::SecretSource::File(path) = &spec.source else {
            continue;
        };
        let real = canonical_prefix(path);
        // The system directories every sandbox reads are on a filesystem it sees too.
        let reached: Vec<PathBuf> = seen
            .iter()
            .cloned()
            .chain(airlock_jail::SYSTEM_DIRS.iter().map(PathBuf::from))
            .collect();
        if let Some(dir) = other_name_seen(path, &reached) {
            return Err(Error::SecretUnavailable {
                secret: spec.name.clone(),
                from: spec.source.to_string(),
                why: format!("the file has more than one name (hard links), on the filesystem of {}, which the sandbox reads: another name may lie inside it, and the sandbox would read the value through that one — give the file a single name (copy it instead of linking it: cp, then rm the other names)", dir.display()),
            });
        }
        let Some(dir) = seen.iter().find(|dir| real.starts_with(dir)) else {
            continue;
        };
        if hidden.iter().any(|h| real.starts_with(h)) {
            continue;
        }
        return Err(Error::SecretUnavailable {
            secret: spec.name.clone(),
            from: spec.source.to_string(),
            why: format!("it lies inside {}, which the sandbox reads: its value would be the sandbox's to read — keep the file outside the workspace and the profile's binds (or hide it)", dir.display()),
        });
    }
    Ok(())
}

/// A tree the sandbox sees on the filesystem of `file`, if `file` has other names (hard links):
/// a hard link is the same file under another path, only ever on the same filesystem, so a
/// name in the workspace or a bind would hand the sandbox the value whatever the path of the
/// source. Where the other names are is not searched (a workspace can be large, and a name made
/// after the search would slip by): more than one name on a filesystem the sandbox reads is
/// refused. A file that cannot be read is left to the source's reader, which says why.
fn other_name_seen<'d>(file: &Path, seen: &'d [PathBuf]) -> Option<&'d Path> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(file).ok()?;
    if meta.nlink() < 2 {
        return None;
    }
    seen.iter()
        .find(|dir| std::fs::metadata(dir).is_ok_and(|d| d.dev() == meta.dev()))
        .map(PathBuf::as_path)
}

/// `path` with its longest existing part made canonical, the rest as written.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |dir, part| dir.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Refuse a profile whose binds name paths this host does not have, or name them through a
/// symlink: the rules above compare the paths as written, and the jail binds what they lead to.
pub(super) fn check_profile_paths_exist(profile: &Profile) -> Result<(), Error> {
    let fs = &profile.filesystem;
    let refuse = |path: &Path, why: String| Err(path_refused(profile, path, why));
    for path in fs.read_only.iter().chain(&fs.read_write) {
        match path.canonicalize() {
            Err(_) => {
                return refuse(
                    path,
                    "it does not exist on this host; create it, or remove it from the profile"
                        .into(),
                )
            }
            Ok(real) if real != *path => {
                return refuse(
                    path,
                    format!(
                        "it leads to {} through a symlink; name that path in the profile",
                        real.display()
                    ),
                )
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Home directories a workspace may lie in but never contain: they hold keys and credentials.
/// Refuse a workspace no session may have (the same checks `run` makes), before a session is made
/// for it.
pub(crate) fn check_workspace_for(
    workspace: &Path,
    state_dir: &Path,
    caller_home: Option<&Path>,
) -> Result<(), Error> {
    let state_dir = state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf());
    check_workspace(workspace, &state_dir, &homes(caller_home))
}

pub(super) fn homes(caller_home: Option<&Path>) -> Vec<PathBuf> {
    let mut homes = vec![PathBuf::from("/root"), PathBuf::from("/home")];
    homes.extend(caller_home.and_then(|home| home.canonicalize().ok()));
    // The caller's own home as the user database has it, whatever HOME says (a service's
    // environment may have none, or another): root's is /root already.
    let euid = nix::unistd::geteuid();
    if !euid.is_root() {
        if let Ok(Some(user)) = nix::unistd::User::from_uid(euid) {
            homes.extend(user.dir.canonicalize().ok());
        }
    }
    homes
}

pub(super) fn check_workspace(
    workspace: &Path,
    state_dir: &Path,
    homes: &[PathBuf],
) -> Result<(), Error> {
    let refuse = |why: &str| {
        Err(Error::Workspace {
            path: workspace.to_path_buf(),
            why: why.to_string(),
        })
    };
    if !workspace.is_dir() {
        return refuse("is not a directory — pass --workspace DIR");
    }
    if workspace == Path::new("/") {
        return refuse("the whole filesystem cannot be a workspace — pass --workspace with a project directory");
    }
    for system in ["/proc", "/sys", "/dev", "/usr", "/etc", "/boot"] {
        if workspace.starts_with(system) {
            return refuse("is a system directory — pass --workspace with a project directory");
        }
    }
    // A home first: it holds airlock's own state directory by default, and "pass --state-dir
    // elsewhere" would be the wrong advice for `cd ~ && airlock run`: the workspace is the
    // mistake, not where the state lives.
    let holds_state = state_dir.starts_with(workspace);
    let state = if holds_state {
        format!(" and airlock's state directory ({})", state_dir.display())
    } else {
        String::new()
    };
    if homes.iter().any(|home| home == workspace) {
        return refuse(&format!("is a home directory: it holds its user's keys and credentials{state}, which no sandbox may reach — run airlock in a project directory under it (cd ~/src/app), or pass --workspace with one"));
    }
    if let Some(home) = homes.iter().find(|home| home.starts_with(workspace)) {
        return refuse(&format!("contains the home directory {}, with its keys and credentials{state} — run airlock in a project directory, or pass --workspace with one", home.display()));
    }
    if workspace.starts_with(state_dir) || holds_state {
        return refuse("contains or lies inside airlock's state directory, which no sandbox may reach — pass --state-dir elsewhere");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_paths_that_open_holes_are_refused() {
        let ws = Path::new("/srv/ws");
        let state = Path::new("/var/lib/airlock");
        let policy = vec![PathBuf::from("/etc/airlock/profiles")];
        let check = |ro: &[&str], rw: &[&str], hide: &[&str]| {
            let mut profile = Profile::builtin_default();
            profile.filesystem.read_only = ro.iter().map(PathBuf::from).collect();
            profile.filesystem.read_write = rw.iter().map(PathBuf::from).collect();
            profile.filesystem.hide = hide.iter().map(PathBuf::from).collect();
            check_profile_paths(&profile, ws, state, &policy).is_ok()
        };
        assert!(check(
            &["/opt/tools", "/srv/ws/.git"],
            &["/srv/cache"],
            &["/srv/ws/.env"]
        ));
        assert!(!check(&["/var/lib"], &[], &[]), "state dir exposed");
        for manager in [
            "/sys/fs/cgroup",
            "/sys",
            "/sys/fs/cgroup/user.slice",
            "/run",
            "/run/user",
            "/run/user/1000",
            "/run/user/1000/bus",
            "/run/user/1000/systemd",
            "/run/user/1000/systemd/private",
            "/run/systemd",
            "/run/dbus",
            "/run/docker.sock",
        ] {
            assert!(!check(&[manager], &[], &[]), "{manager} bound read-only");
            assert!(!check(&[], &[manager], &[]), "{manager} bound read-write");
        }
        assert!(check(
            &[
                "/run/user/1000/pulse",
                "/sys/class/net",
                "/run/systemd/resolve",
                "/opt/run/user/1000/bus"
            ],
            &[],
            &[]
        ));
        assert!(
            !check(&["/var/lib/airlock/sessions"], &[], &[]),
            "state dir exposed"
        );
        assert!(!check(&[], &["/srv"], &[]), "rw containing the workspace");
        assert!(
            !check(&[], &["/srv/ws/build"], &[]),
            "rw inside the workspace"
        );
        assert!(
            !check(&["/srv/cache/tools"], &["/srv/cache"], &[]),
            "ro nested in rw"
        );
        assert!(
            !check(&[], &["/srv/cache"], &["/srv/cache/key"]),
            "hide nested in rw"
        );
        assert!(!check(&[], &["/etc"], &[]), "rw over policy");
        assert!(!check(&["/srv/ws"], &[], &[]), "the workspace itself");
    }

    #[test]
    fn workspace_refusals() {
        let state = tempfile::tempdir().unwrap();
        let homes = homes(None);
        assert!(check_workspace(Path::new("/"), state.path(), &homes).is_err());
        assert!(check_workspace(Path::new("/usr/lib"), state.path(), &homes).is_err());
        assert!(check_workspace(state.path(), &state.path().join("x"), &homes).is_err());
        assert!(check_workspace(Path::new("/home"), state.path(), &homes).is_err());
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        let mine = super::homes(Some(&home));
        assert!(
            check_workspace(&home, state.path(), &mine).is_err(),
            "the caller's home"
        );
        // With airlock's state in it, as it is by default: the home is what is wrong.
        let refused = check_workspace(&home, &home.join(".local/state/airlock"), &mine)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("is a home directory"), "{refused}");
        assert!(refused.contains(".local/state/airlock"), "{refused}");
        assert!(
            refused.contains("run airlock in a project directory"),
            "{refused}"
        );
        assert!(!refused.contains("--state-dir"), "{refused}");
        let parent = home.parent().unwrap();
        let refused = check_workspace(parent, state.path(), &mine)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("contains the home directory"), "{refused}");
        std::fs::create_dir(home.join("project")).unwrap();
        assert!(check_workspace(&home.join("project"), state.path(), &mine).is_ok());
        let ws = tempfile::tempdir().unwrap();
        assert!(check_workspace(ws.path(), state.path(), &homes).is_ok());
    }

    #[test]
    fn a_secret_file_the_sandbox_sees_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(ws.join(".secrets")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join(".secrets/gh"), "v").unwrap();
        std::fs::write(outside.join("gh"), "v").unwrap();
        std::os::unix::fs::symlink(ws.join(".secrets/gh"), outside.join("link")).unwrap();
        let check = |file: &Path, ro: &[&Path], hide: &[&Path]| {
            let mut profile = Profile::builtin_default();
            profile.secrets.push(airlock_policy::SecretSpec {
                name: "GH".into(),
                source: airlock_policy::SecretSource::File(file.to_path_buf()),
                hosts: vec!["api.github.com".into()],
                inject: airlock_policy::Injection::Placeholder {
                    headers: Vec::new(),
                },
            });
            profile.filesystem.read_only = ro.iter().map(|p| p.to_path_buf()).collect();
            profile.filesystem.hide = hide.iter().map(|p| p.to_path_buf()).collect();
            check_secret_files(&profile, &ws)
        };
        assert!(check(&outside.join("gh"), &[], &[]).is_ok());
        let refused = check(&ws.join(".secrets/gh"), &[], &[]).unwrap_err();
        assert!(
            matches!(refused, Error::SecretUnavailable { .. }),
            "{refused}"
        );
        assert!(
            check(&outside.join("link"), &[], &[]).is_err(),
            "a symlink into it"
        );
        assert!(
            check(&outside.join("gh"), &[&outside], &[]).is_err(),
            "a bind"
        );
        assert!(check(&ws.join(".secrets/gh"), &[], &[&ws.join(".secrets")]).is_ok());
        // A second name of the file inside the workspace: the sandbox reads the value there.
        std::fs::hard_link(outside.join("gh"), ws.join("copy")).unwrap();
        let refused = check(&outside.join("gh"), &[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("more than one name (hard links)"),
            "{refused}"
        );
        assert!(
            refused.contains("copy it instead of linking it"),
            "{refused}"
        );
        // Hard links are refused on the tree's filesystem wherever the other name is.
        std::fs::remove_file(ws.join("copy")).unwrap();
        std::fs::hard_link(outside.join("gh"), outside.join("gh2")).unwrap();
        assert!(check(&outside.join("gh"), &[], &[]).is_err());
        std::fs::remove_file(outside.join("gh2")).unwrap();
        assert!(
            check(&outside.join("gh"), &[], &[]).is_ok(),
            "one name again"
        );
    }
}
