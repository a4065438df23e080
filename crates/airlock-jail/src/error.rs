//! One error type for the jail: each variant says what failed, on which path, the errno, and what
//! the user can do about it.

use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::wait::WaitStatus;

use crate::apparmor::UsernsRestriction;
pub use crate::protocol::Peer;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("cannot {action} {path}: {errno} — {hint}", path = path.display(), errno = errno.desc())]
    Path {
        action: &'static str,
        path: PathBuf,
        errno: Errno,
        hint: &'static str,
    },
    #[error("cannot {action}: {errno} — {hint}", errno = errno.desc())]
    Syscall {
        action: &'static str,
        errno: Errno,
        hint: &'static str,
    },
    #[error("{layer} is not available on this kernel ({why}); refusing to run with less protection than asked for — run 'airlock check', or accept it explicitly with --allow-degraded={flag}")]
    LayerMissing {
        layer: &'static str,
        why: &'static str,
        flag: &'static str,
    },
    /// systemd's user manager did not give the run the scope it asked for (see `cgroup::systemd`).
    #[error("cannot get the run's cgroup from systemd (scope {unit}): {why} — `journalctl --user -u {unit}` may say why")]
    SystemdScope { unit: String, why: String },
    /// AppArmor keeps this process from using user namespaces: the restriction found, whose
    /// words and fix are [`UsernsRestriction::refusal`]'s.
    #[error("{}", .0.refusal().unwrap_or_else(|| "cannot build a sandbox: AppArmor restricts user namespaces".into()))]
    UserNamespacesRestricted(UsernsRestriction),

    // The setup protocol (see `protocol.rs`): the two sides disagree on a step, or one is gone.
    // Each is a bug or a dead process; the setup process's own report, when there is one, says
    // more and is returned instead.
    /// A message came where another was due.
    #[error("sandbox setup failed: unexpected message {received} from {from} (wanted {expected})")]
    UnexpectedMessage {
        expected: &'static str,
        received: &'static str,
        from: Peer,
    },
    /// A known message with a number of descriptors it never carries.
    #[error("sandbox setup failed: {from} sent {message} with {fds} descriptors (a bug: please report it)")]
    MalformedMessage {
        message: &'static str,
        fds: usize,
        from: Peer,
    },
    /// A tag no message has (the control socket's, or the report pipe's first byte).
    #[error("sandbox setup failed: unknown message {tag:#x} from {from}")]
    UnknownMessage { tag: u8, from: Peer },
    #[error("sandbox setup failed: {from} sent more descriptors than any message carries (a bug: please report it)")]
    TooManyDescriptors { from: Peer },
    /// As root, NAMESPACES came without the user namespaces the setup process enters.
    #[error("sandbox setup failed: {from} sent no user namespaces (a bug: please report it)")]
    NoUserNamespaces { from: Peer },
    #[error("sandbox setup failed: sending to {to}: {errno}", errno = errno.desc())]
    SendFailed { to: Peer, errno: Errno },
    #[error("sandbox setup failed: reading from {from}: {errno}", errno = errno.desc())]
    ReceiveFailed { from: Peer, errno: Errno },
    /// End of file where a message was due: the other side exited (or was killed).
    #[error("sandbox setup failed: {peer} went away during setup")]
    PeerGone { peer: Peer },
    /// What the setup process reported before it exited: its own error, as text, as it came
    /// over the report pipe from that other process.
    #[error("sandbox setup failed: {0}")]
    SetupReported(String),
    #[error("sandbox setup failed: landlock: {0} — run 'airlock check', or accept running without it: --allow-degraded=landlock")]
    Landlock(landlock::RulesetError),
    /// The sandbox's pid 1 neither exited nor was killed, as far as waitpid says.
    #[error("sandbox setup failed: unexpected wait status {0:?}")]
    UnexpectedWaitStatus(WaitStatus),

    // The request, or the state of the host it meets, cannot make a sandbox.
    #[error("invalid sandbox request: no command given")]
    NoCommand,
    /// The command a prepared sandbox was given at START did not read back (a bug).
    #[error("sandbox setup failed: the command from the supervisor is malformed: {0}")]
    MalformedCommand(&'static str),
    #[error("invalid sandbox request: the sandbox user must not be root on the host")]
    SandboxUserIsRoot,
    #[error("invalid sandbox request: {HOSTS_ROOT_WITHOUT_PRIVILEGE}")]
    HostsRootWithoutPrivilege,
    #[error("invalid sandbox request: --allow-degraded=landlock is refused for a root without CAP_SYS_ADMIN (a container's root): the sandbox's uid is then root's own, and Landlock keeps it from what that uid may write; run airlock as an unprivileged user instead")]
    LandlockRequiredForRoot,
    /// overlayfs takes its options as a string.
    #[error("invalid sandbox request: workspace path {} is not valid UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    /// A path inside the sandbox that is relative or has `..`.
    #[error("invalid sandbox request: path {} must be absolute and free of '..'", path.display())]
    NotBeneath { path: PathBuf },
    #[error("invalid sandbox request: the /etc cache entry {} keeps being removed while in use; is another airlock cleaning {}?", entry.display(), cache.display())]
    EtcCacheUnstable { entry: PathBuf, cache: PathBuf },
    #[error("invalid sandbox request: a session with [limits] disk or files needs mkfs.ext4 (Debian: apt-get install e2fsprogs); or accept a watch on free space instead: --allow-degraded=disk")]
    NoMkfs,
    /// mkfs.ext4 failed; `stderr` is what it said.
    #[error("invalid sandbox request: mkfs.ext4 {}: {} — is [limits] disk large enough for files? (at least 4MiB)", image.display(), stderr.trim())]
    MkfsFailed { image: PathBuf, stderr: String },
    #[error("invalid sandbox request: sandbox {pid} has already ended")]
    SandboxEnded { pid: i32 },
    #[error("invalid sandbox request: the sandbox kept starting processes faster than they could be stopped; kill it instead")]
    StopOutpaced,
    /// The cgroup freezer's `file` did not say `wanted` within 5 s.
    #[error("invalid sandbox request: {} did not report '{wanted}' within 5 s", file.display())]
    FreezerStuck { file: PathBuf, wanted: &'static str },
    #[error("invalid sandbox request: the filesystem of {} has {} MiB free, below the {} MiB airlock keeps free there (so that the audit log can always be written): free some space, or move the state directory (--state-dir)", path.display(), free_bytes >> 20, keep_free_bytes >> 20)]
    DiskLow {
        path: PathBuf,
        free_bytes: u64,
        keep_free_bytes: u64,
    },
    #[error("invalid sandbox request: the filesystem of {} has {free_inodes} inodes free, at or below the {keep_free_inodes} airlock keeps free there (so that files can still be made on it): remove some files, or move the state directory (--state-dir)", path.display())]
    InodesLow {
        path: PathBuf,
        free_inodes: u64,
        keep_free_inodes: u64,
    },
    /// A failure of the caller's own around the sandbox (core's: its network gate, the flag
    /// that cuts a run's network), in its words.
    #[error("invalid sandbox request: {0}")]
    Caller(String),
    /// The caller's last check before the command starts said no (its message).
    #[error("{0}")]
    Refused(String),
}

/// Why the host's root without privilege is refused (see `launch::prepare`'s check), and what to do.
const HOSTS_ROOT_WITHOUT_PRIVILEGE: &str = "this is the host's root (uid 0 of the initial user \
     namespace) without CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID and CAP_SETGID (a rootful \
     container's root): the sandbox would run as the host's root uid, which owns the host's \
     files — run airlock as an unprivileged user (podman/docker --user), or as the root of a \
     user namespace (podman --userns=auto, rootless podman or Docker), or as root with those \
     capabilities (see docs/containers.md)";

pub type Result<T, E = JailError> = std::result::Result<T, E>;

/// The hint for failures that only a bug or a broken kernel explains.
pub(crate) const UNEXPECTED: &str = "unexpected: please report it";

/// Attach a path and a hint to a failed syscall.
pub(crate) trait PathContext<T> {
    fn on_path(
        self,
        action: &'static str,
        path: impl Into<PathBuf>,
        hint: &'static str,
    ) -> Result<T>;
}

/// An error that carries an errno: the syscall wrappers' `Errno`, or std's `io::Error`.
pub(crate) trait HasErrno {
    fn errno(self) -> Errno;
}

impl HasErrno for Errno {
    fn errno(self) -> Errno {
        self
    }
}

impl HasErrno for std::io::Error {
    fn errno(self) -> Errno {
        Errno::from_raw(self.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// landlock's error for a path it could not open: the errno of its `open`.
impl HasErrno for landlock::PathFdError {
    fn errno(self) -> Errno {
        let io = std::error::Error::source(&self)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .and_then(std::io::Error::raw_os_error);
        Errno::from_raw(io.unwrap_or(libc::EIO))
    }
}

impl<T, E: HasErrno> PathContext<T> for std::result::Result<T, E> {
    fn on_path(
        self,
        action: &'static str,
        path: impl Into<PathBuf>,
        hint: &'static str,
    ) -> Result<T> {
        self.map_err(|e| JailError::Path {
            action,
            path: path.into(),
            errno: e.errno(),
            hint,
        })
    }
}

pub(crate) trait SyscallContext<T> {
    fn during(self, action: &'static str, hint: &'static str) -> Result<T>;
}

impl<T, E: HasErrno> SyscallContext<T> for std::result::Result<T, E> {
    fn during(self, action: &'static str, hint: &'static str) -> Result<T> {
        self.map_err(|e| JailError::Syscall {
            action,
            errno: e.errno(),
            hint,
        })
    }
}
