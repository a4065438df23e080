//! A server's runs inside the cgroup systemd delegated to its unit (`Delegate=yes`, as
//! packaging/systemd/airlock.service has): the server moves itself into a leaf of it,
//! `airlock-server`, and hands memory, pids and cpu down, so that each run's cgroup is made beside
//! that leaf, inside the unit. `systemctl stop` then ends the runs with the server, their use
//! counts as the unit's, and airlock writes nowhere systemd did not give it — not into
//! systemd's own slices, not beside them at the hierarchy's root.
//!
//! Delegation is read from the mark systemd (v251 on) sets on a delegated unit's cgroup
//! (`trusted.delegate`, and `user.delegate` for readers without CAP_SYS_ADMIN, such as a
//! container's root), and only on a cgroup this user owns: the owner of any cgroup may set
//! `user.delegate` on it, so without the owner's check an ordinary user could lead a root airlock
//! started in their cgroup (`sudo` from a desktop terminal) to make its runs' cgroups where that
//! user may move the sandbox out of its limits. Only its owner (or root) may set an attribute on
//! a cgroup this user owns.

use std::fs;
use std::path::{Path, PathBuf};

use super::ROOT;

/// The leaf a server moves itself into; its parent is where the runs' cgroups are made.
pub(super) const SERVER_LEAF: &str = "airlock-server";

/// This process's cgroup on v2, as a directory under /sys/fs/cgroup (None on v1 alone, or
/// where /proc says nothing).
fn own_cgroup() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    // A path outside this cgroup namespace's root is shown with "/.." (nothing to use).
    if path.split('/').any(|part| part == "..") {
        return None;
    }
    Some(Path::new(ROOT).join(path.trim_start_matches('/')))
}

/// Did systemd delegate `dir` (a unit's cgroup with `Delegate=yes`) to this user: owned by it,
/// with the mark this user can trust (see the module's comment)?
fn is_delegated(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let euid = nix::unistd::geteuid();
    if !fs::metadata(dir).is_ok_and(|meta| meta.uid() == euid.as_raw()) {
        return false;
    }
    ["trusted.delegate", "user.delegate"].iter().any(|mark| {
        let mut value = [0u8; 8];
        rustix::fs::getxattr(dir, *mark, &mut value[..]).is_ok_and(|len| &value[..len] == b"1")
    })
}

/// Owned by this user (the leaf a server made itself).
fn is_own(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(dir).is_ok_and(|meta| meta.uid() == nix::unistd::geteuid().as_raw())
}

fn controllers(file: &Path) -> Vec<String> {
    fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Where a process of a server settled by [`settle_server`] (the server, its workers) makes its
/// runs' cgroups: the delegated unit's cgroup, and whether cpu is handed down there.
pub(super) fn server_parent() -> Option<(PathBuf, bool)> {
    let own = own_cgroup()?;
    if own.file_name()? != SERVER_LEAF {
        return None;
    }
    let parent = own.parent()?;
    let handed_down = controllers(&parent.join("cgroup.subtree_control"));
    let has = |name: &str| handed_down.iter().any(|c| c == name);
    (is_own(&own)
        && is_delegated(parent)
        && has("memory")
        && has("pids")
        && super::writable_dir(parent))
    .then(|| (parent.to_path_buf(), has("cpu")))
}

/// For a server started in a cgroup systemd delegated to it: move this process into its leaf
/// and hand memory, pids (and cpu, when there) down. The unit's cgroup, once done; None where
/// this process's cgroup is not delegated (runs then get a cgroup as a command's would); an
/// error in words when it is, but cannot be used (another process is in it, say).
pub fn settle_server() -> Result<Option<PathBuf>, String> {
    let Some(own) = own_cgroup() else {
        return Ok(None);
    };
    if own.file_name().is_some_and(|name| name == SERVER_LEAF) {
        // Settled already (a server restarted in place, or a worker of one).
        return Ok(server_parent().map(|(parent, _)| parent));
    }
    if own == Path::new(ROOT) || !is_delegated(&own) {
        return Ok(None);
    }
    let leaf = own.join(SERVER_LEAF);
    let failed = |what: &str, path: &Path, error: std::io::Error| {
        format!(
            "the cgroup {} that systemd delegated to this server cannot hold its runs: {what} \
             {}: {error}",
            own.display(),
            path.display()
        )
    };
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(failed("create", &leaf, error)),
    }
    let procs = leaf.join("cgroup.procs");
    fs::write(&procs, std::process::id().to_string())
        .map_err(|error| failed("move this server into", &procs, error))?;
    let available = controllers(&own.join("cgroup.controllers"));
    let wanted: Vec<String> = ["memory", "pids", "cpu"]
        .iter()
        .filter(|name| available.iter().any(|c| c == *name))
        .map(|name| format!("+{name}"))
        .collect();
    let subtree = own.join("cgroup.subtree_control");
    // EBUSY while another process is still in the unit's own cgroup (an ExecStartPre left
    // running, say): the kernel hands controllers down only from a cgroup with no process.
    fs::write(&subtree, wanted.join(" "))
        .map_err(|error| failed("hand memory and pids down through", &subtree, error))?;
    Ok(Some(own))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(dir: &Path, name: &str) {
        rustix::fs::setxattr(dir, name, b"1", rustix::fs::XattrFlags::empty())
            .unwrap_or_else(|e| panic!("setxattr {name} on {}: {e}", dir.display()));
    }

    /// systemd's mark counts on a cgroup this user owns, and on no other: the owner of any
    /// cgroup may set `user.delegate` on it. (A directory stands in for the cgroup: the rule is
    /// about the owner and the attribute; its filesystem must keep user xattrs, as /tmp's ext4
    /// does on the machines CI runs on.)
    #[test]
    fn a_mark_counts_only_on_a_cgroup_this_user_owns() {
        let base = tempfile::tempdir().unwrap();
        let marked = base.path().join("marked");
        fs::create_dir(&marked).unwrap();
        mark(&marked, "user.delegate");
        assert!(is_delegated(&marked));
        assert!(!is_delegated(base.path()), "no mark at all");
        if nix::unistd::geteuid().is_root() {
            // Another user's cgroup, marked by that user (here by root, for the test): theirs.
            std::os::unix::fs::chown(&marked, Some(4242), None).unwrap();
            assert!(!is_delegated(&marked));
            let by_system = base.path().join("system-marked");
            fs::create_dir(&by_system).unwrap();
            mark(&by_system, "trusted.delegate");
            assert!(is_delegated(&by_system));
        }
    }
}
