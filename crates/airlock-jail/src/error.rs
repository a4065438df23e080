//! One error type for the jail: each variant says what failed, on which path, the errno, and what
//! the user can do about it.

use std::path::PathBuf;

use nix::errno::Errno;

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
        why: String,
        flag: &'static str,
    },
    /// AppArmor keeps this process from using user namespaces (the words and the fix made by
    /// [`crate::apparmor::UsernsRestriction::refusal`]).
    #[error("{0}")]
    UserNamespacesRestricted(String),
    #[error("sandbox setup failed: {0}")]
    Inside(String),
    /// What the setup process itself reported before it exited.
    #[error("sandbox setup failed: {0}")]
    Reported(String),
    #[error("invalid sandbox request: {0}")]
    Invalid(String),
    /// The caller's last check before the command starts said no (its message).
    #[error("{0}")]
    Refused(String),
}

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

impl<T> SyscallContext<T> for nix::Result<T> {
    fn during(self, action: &'static str, hint: &'static str) -> Result<T> {
        self.map_err(|errno| JailError::Syscall {
            action,
            errno,
            hint,
        })
    }
}
