//! User namespaces the supervisor makes when it runs as root, handed to the setup process.
//!
//! When airlock runs as root, the sandbox user is a dedicated unprivileged uid that owns nothing
//! in the workspace, so it could read files but never edit them. The overlay's lower layer is
//! therefore an idmapped mount of the workspace on which the workspace owner's files appear as the
//! sandbox user's; every other owner keeps its own id. Copy-up then gives the sandbox user its own
//! editable copy, and the host files stay untouched.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{PathContext, Result, SyscallContext, UNEXPECTED};
use crate::spec::IdMapping;
use crate::sys::{clone_idle, VmChild};

/// Largest valid id: (u32)-1 means "no id".
const ID_LIMIT: u64 = u32::MAX as u64;

/// id_map extents `(inside, outside, count)` for a mount idmapping: the on-disk id `owner` shows as
/// `sandbox`, every other id as itself, except `sandbox` on disk, which has no mapping (it would
/// otherwise collide with the workspace owner's files).
pub(crate) fn extents(owner: u32, sandbox: u32) -> Vec<(u32, u32, u32)> {
    let mut out = vec![(owner, sandbox, 1)];
    let (low, high) = (owner.min(sandbox) as u64, owner.max(sandbox) as u64);
    for (start, end) in [(0, low), (low + 1, high), (high + 1, ID_LIMIT)] {
        if end > start {
            out.push((start as u32, start as u32, (end - start) as u32));
        }
    }
    out
}

fn render(extents: &[(u32, u32, u32)]) -> String {
    extents
        .iter()
        .map(|(inside, outside, count)| format!("{inside} {outside} {count}\n"))
        .collect()
}

/// The maps of a sandbox's user namespace: its inside uid and gid are the unprivileged host ids,
/// and nothing else exists.
pub(crate) fn sandbox_maps(ids: &IdMapping) -> (String, String) {
    (
        format!("{} {} 1\n", ids.inside_uid, ids.host_uid),
        format!("{} {} 1\n", ids.inside_gid, ids.host_gid),
    )
}

/// Write the id maps of `pid`'s user namespace. An unprivileged writer must deny setgroups first.
pub(crate) fn write_maps(
    pid: Pid,
    uid_map: &str,
    gid_map: &str,
    deny_setgroups: bool,
    hint: &'static str,
) -> Result<()> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let setgroups = deny_setgroups.then_some(("setgroups", "deny"));
    for (file, content) in setgroups
        .into_iter()
        .chain([("uid_map", uid_map), ("gid_map", gid_map)])
    {
        std::fs::write(dir.join(file), content).on_path(
            "write the id map",
            dir.join(file),
            hint,
        )?;
    }
    Ok(())
}

/// A user namespace with a given mapping, made by the supervisor (root) and held by an fd. Its
/// helper process is killed at once but reaped only by [`HelperNamespace::reap`], off the launch's
/// critical path.
pub(crate) struct HelperNamespace {
    pub fd: OwnedFd,
    /// Killed and reaped when dropped.
    helper: Option<VmChild>,
    /// The maps to write, until [`HelperNamespace::apply_maps`] has.
    maps: Option<(String, String)>,
}

impl HelperNamespace {
    /// For the overlay's lower layer: the workspace owner's files show as the sandbox user's.
    pub(crate) fn idmapped_workspace(
        owner: (u32, u32),
        sandbox: (u32, u32),
    ) -> Result<HelperNamespace> {
        Self::create(
            &render(&extents(owner.0, sandbox.0)),
            &render(&extents(owner.1, sandbox.1)),
        )
    }

    /// For the sandbox itself (see [`sandbox_maps`]).
    pub(crate) fn sandbox(ids: &IdMapping) -> Result<HelperNamespace> {
        let (uid_map, gid_map) = sandbox_maps(ids);
        Self::create(&uid_map, &gid_map)
    }

    /// The namespace, still without its maps: see [`HelperNamespace::apply_maps`].
    fn create(uid_map: &str, gid_map: &str) -> Result<HelperNamespace> {
        let helper = clone_idle(libc::CLONE_NEWUSER)
            .during("create a user namespace", "run 'airlock check'")?;
        Ok(HelperNamespace {
            fd: open_user_namespace(helper.pid)?,
            helper: Some(helper),
            maps: Some((uid_map.to_string(), gid_map.to_string())),
        })
    }

    /// Write the namespace's maps (once) and let its helper go: the fd keeps the namespace
    /// alive. Apart from [`HelperNamespace::create`] so that the launch can do it after the
    /// sandbox's clone, while the setup process mounts (it needs the namespaces only then).
    pub(crate) fn apply_maps(&mut self) -> Result<()> {
        if let (Some((uid_map, gid_map)), Some(helper)) = (self.maps.take(), &self.helper) {
            write_maps(helper.pid, &uid_map, &gid_map, false, UNEXPECTED)?;
            let _ = kill(helper.pid, Signal::SIGKILL);
        }
        Ok(())
    }

    /// Collect the helper process.
    pub(crate) fn reap(&mut self) {
        self.helper.take();
    }
}

fn open_user_namespace(helper: Pid) -> Result<OwnedFd> {
    let ns = PathBuf::from(format!("/proc/{helper}/ns/user"));
    std::fs::File::open(&ns)
        .map(OwnedFd::from)
        .on_path("open", ns, UNEXPECTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_maps_to_sandbox_and_the_rest_to_themselves() {
        assert_eq!(
            extents(0, 2_999_000),
            vec![
                (0, 2_999_000, 1),
                (1, 1, 2_998_999),
                (2_999_001, 2_999_001, u32::MAX - 2_999_001)
            ]
        );
        assert_eq!(
            extents(5000, 100),
            vec![
                (5000, 100, 1),
                (0, 0, 100),
                (101, 101, 4899),
                (5001, 5001, u32::MAX - 5001)
            ]
        );
    }

    #[test]
    fn extents_never_overlap() {
        for (owner, sandbox) in [(0, 1), (1, 0), (7, 2_999_000), (u32::MAX - 1, 3)] {
            let ext = extents(owner, sandbox);
            let mut inside: Vec<(u64, u64)> = ext
                .iter()
                .map(|e| (e.0 as u64, e.0 as u64 + e.2 as u64))
                .collect();
            let mut outside: Vec<(u64, u64)> = ext
                .iter()
                .map(|e| (e.1 as u64, e.1 as u64 + e.2 as u64))
                .collect();
            for ranges in [&mut inside, &mut outside] {
                ranges.sort();
                assert!(
                    ranges.windows(2).all(|w| w[0].1 <= w[1].0),
                    "{owner} {sandbox}: {ext:?}"
                );
            }
        }
    }
}
