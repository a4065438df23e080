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

use rustix::thread::CapabilitySet;

/// What the rootful way needs, all of it, in the effective set.
const ROOTFUL_CAPABILITIES: CapabilitySet = CapabilitySet::SYS_ADMIN
    .union(CapabilitySet::NET_ADMIN)
    .union(CapabilitySet::SETUID)
    .union(CapabilitySet::SETGID);

/// The way a sandbox is built, decided once per request by its caller (core) and carried as a
/// value: in the sandbox's spec, in a session's record, to the change-set scanner. Never read
/// from a process-wide cell: a value shows where it came from, and a session keeps the way it
/// was made even when a later request is made the other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// uid 0 with [`ROOTFUL_CAPABILITIES`] in the initial user namespace: mounts and namespaces
    /// without a user namespace, a dedicated sandbox uid, overlay xattrs `trusted.overlay.*`.
    Rootful,
    /// In a user namespace of its own, as any unprivileged user (or a container's root): the
    /// sandbox is the caller's own uid, overlay xattrs `user.overlay.*` (`userxattr`).
    UserNamespace,
}

impl Way {
    /// The way this process can take, from its effective uid, capabilities and user namespace.
    /// Each call reads them afresh; the caller decides once per request and passes the value on.
    pub fn of_this_process() -> Way {
        let effective = rustix::thread::capabilities(None)
            .map(|sets| sets.effective)
            .unwrap_or(CapabilitySet::empty());
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").ok();
        way_from(
            nix::unistd::geteuid().as_raw(),
            effective,
            uid_map.as_deref(),
        )
    }

    pub fn is_rootful(self) -> bool {
        self == Way::Rootful
    }

    /// Who takes this way, for a message a person reads.
    pub fn describe(self) -> &'static str {
        match self {
            Way::Rootful => {
                "by a root with CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID and CAP_SETGID"
            }
            Way::UserNamespace => {
                "in a user namespace (unprivileged, or a root without CAP_SYS_ADMIN)"
            }
        }
    }
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

/// The decision of [`Way::of_this_process`], from what it reads. Without a readable uid map (no
/// /proc) the namespace cannot be known, and the user-namespace way is the one that works
/// anywhere.
fn way_from(euid: u32, effective: CapabilitySet, uid_map: Option<&str>) -> Way {
    let initial_namespace = uid_map.is_some_and(is_initial_namespace);
    if euid == 0 && effective.contains(ROOTFUL_CAPABILITIES) && initial_namespace {
        Way::Rootful
    } else {
        Way::UserNamespace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_rootful(euid: u32, effective: CapabilitySet, uid_map: Option<&str>) -> bool {
        way_from(euid, effective, uid_map).is_rootful()
    }

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
