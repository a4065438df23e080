//! Which of the two ways of building a sandbox this process can take: the rootful one, or the
//! one in a user namespace of its own that any unprivileged user has.
//!
//! Being uid 0 is not enough for the rootful way. It mounts and makes namespaces without a user
//! namespace (CAP_SYS_ADMIN), brings up loopback in them (CAP_NET_ADMIN), maps a dedicated
//! sandbox uid into the helper user namespaces (CAP_SETUID, CAP_SETGID), and idmaps host
//! filesystems and uses trusted xattrs for overlayfs, which the kernel allows only in the initial
//! user namespace. A container's root has uid 0 and none of that (Docker and Podman drop
//! CAP_SYS_ADMIN and CAP_NET_ADMIN; a rootless or `--userns` container is a user namespace of its
//! own): it takes the user-namespace way, as an unprivileged user does.

use std::sync::OnceLock;

use rustix::thread::CapabilitySet;

/// What the rootful way needs, all of it, in the effective set.
const ROOTFUL_CAPABILITIES: CapabilitySet = CapabilitySet::SYS_ADMIN
    .union(CapabilitySet::NET_ADMIN)
    .union(CapabilitySet::SETUID)
    .union(CapabilitySet::SETGID);

/// True when this process builds sandboxes the rootful way: uid 0 with [`ROOTFUL_CAPABILITIES`]
/// in the initial user namespace. Decided once per process: neither changes while it runs.
pub fn rootful() -> bool {
    static ROOTFUL: OnceLock<bool> = OnceLock::new();
    *ROOTFUL.get_or_init(|| {
        let effective = rustix::thread::capabilities(None)
            .map(|sets| sets.effective)
            .unwrap_or(CapabilitySet::empty());
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").ok();
        is_rootful(
            nix::unistd::geteuid().as_raw(),
            effective,
            uid_map.as_deref(),
        )
    })
}

/// True when this process's uid 0 is the host's root: uid 0 in the initial user namespace
/// (a rootful container without a user namespace of its own, or capabilities dropped on the
/// host), rather than the root of a user namespace whose uid 0 is some other host uid.
pub fn is_hosts_root() -> bool {
    nix::unistd::geteuid().is_root()
        && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| is_initial_namespace(&map))
}

/// Is `uid_map` (a /proc/PID/uid_map) the initial user namespace's: every uid mapped to itself?
pub(crate) fn is_initial_namespace(uid_map: &str) -> bool {
    uid_map.split_whitespace().eq(["0", "0", "4294967295"])
}

/// The xattr namespace of the overlays this process mounts: `trusted.` the rootful way, `user.`
/// (the `userxattr` option) in a user namespace. SECURITY: only the one in use may be read: the
/// other is the sandbox's to set on its own files.
pub fn overlay_xattr_prefix() -> &'static str {
    if rootful() {
        "trusted.overlay."
    } else {
        "user.overlay."
    }
}

/// The decision of [`rootful`], from what it reads. Without a readable uid map (no /proc) the
/// namespace cannot be known, and the user-namespace way is the one that works anywhere.
fn is_rootful(euid: u32, effective: CapabilitySet, uid_map: Option<&str>) -> bool {
    let initial_namespace = uid_map.is_some_and(is_initial_namespace);
    euid == 0 && effective.contains(ROOTFUL_CAPABILITIES) && initial_namespace
}

#[cfg(test)]
mod tests {
    use super::*;

    const INITIAL: &str = "         0          0 4294967295\n";
    /// What Podman's root gets by default (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL,
    /// NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT): no SYS_ADMIN, NET_ADMIN.
    const PODMAN_ROOT: u64 = 0x8000_05fb;

    #[test]
    fn root_with_every_capability_in_the_initial_namespace_is_rootful() {
        assert!(is_rootful(0, CapabilitySet::all(), Some(INITIAL)));
    }

    #[test]
    fn a_containers_root_is_not() {
        let podman = CapabilitySet::from_bits_retain(PODMAN_ROOT);
        assert!(!podman.contains(CapabilitySet::SYS_ADMIN));
        assert!(!is_rootful(0, podman, Some(INITIAL)));
        // All capabilities, but in a user namespace (rootless Podman, --userns).
        assert!(!is_rootful(
            0,
            CapabilitySet::all(),
            Some("0 100000 65536\n")
        ));
        assert!(!is_rootful(0, CapabilitySet::all(), None));
    }

    #[test]
    fn one_missing_capability_is_enough_to_take_the_user_namespace_way() {
        for missing in [
            CapabilitySet::SYS_ADMIN,
            CapabilitySet::NET_ADMIN,
            CapabilitySet::SETUID,
            CapabilitySet::SETGID,
        ] {
            let effective = CapabilitySet::all().difference(missing);
            assert!(!is_rootful(0, effective, Some(INITIAL)), "{missing:?}");
        }
    }

    #[test]
    fn an_unprivileged_user_is_not_rootful_whatever_its_capabilities() {
        assert!(!is_rootful(1000, CapabilitySet::all(), Some(INITIAL)));
    }
}
