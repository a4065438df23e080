//! The supervisor's watch on the filesystem under a session's layer (see [`DiskGuard`]): where
//! the kernel bounds nothing smaller than the whole filesystem (an unprivileged user has no
//! quota on a directory), the sandbox is killed before the free space falls below the margin
//! that keeps the audit log writable (and before its free inodes fall below theirs: empty
//! files take no bytes), and RLIMIT_FSIZE holds every single file to what is left.

use std::time::Duration;

use crate::error::{JailError, Result};
use crate::spec::DiskGuard;

/// How often the watch reads the free space: at a writer's page-cache speed (~1 GB/s) it may
/// write ~10 MB between two looks, well inside the margin.
pub(crate) const INTERVAL: Duration = Duration::from_millis(10);

/// What is free for unprivileged writers on the filesystem of `guard.path`.
#[derive(Debug, Clone, Copy)]
struct Free {
    bytes: u64,
    inodes: u64,
}

fn free(guard: &DiskGuard) -> Result<Free> {
    let stat = rustix::fs::statvfs(&guard.path).map_err(|e| JailError::Syscall {
        action: "read the free space of the state directory's filesystem (statvfs)",
        errno: nix::errno::Errno::from_raw(e.raw_os_error()),
        hint: "is the state directory still there? run 'airlock check'",
    })?;
    Ok(Free {
        bytes: test_view(
            &BYTES_SHIFT,
            "AIRLOCK_TEST_DISK_ROOM",
            stat.f_bavail.saturating_mul(stat.f_frsize),
            guard.keep_free_bytes,
        ),
        inodes: test_view(
            &INODES_SHIFT,
            "AIRLOCK_TEST_INODE_ROOM",
            stat.f_favail,
            guard.keep_free_inodes,
        ),
    })
}

static BYTES_SHIFT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
static INODES_SHIFT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The watch's and the fsize limit's tests need a nearly full filesystem, which an unprivileged
/// user cannot make: debug builds (the test suite's) can pretend that the filesystem had only
/// `AIRLOCK_TEST_DISK_ROOM` bytes (`AIRLOCK_TEST_INODE_ROOM` inodes) free above the margin
/// when it was first looked at; what is written afterwards counts as it really is. Release
/// builds never look.
fn test_view(shift: &std::sync::OnceLock<u64>, var: &str, free: u64, margin: u64) -> u64 {
    #[cfg(debug_assertions)]
    {
        if let Some(room) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
            let shift = *shift.get_or_init(|| free.saturating_sub(margin.saturating_add(room)));
            return free.saturating_sub(shift);
        }
    }
    let _ = (shift, var, margin);
    free
}

/// What one run may still write: the free space above the margin, and at most its budget.
/// Refuses a run that could not write a byte.
pub(crate) fn file_size_limit(guard: &DiskGuard) -> Result<u64> {
    let free = free(guard)?;
    let room = free.bytes.saturating_sub(guard.keep_free_bytes);
    if room == 0 {
        return Err(JailError::DiskLow {
            path: guard.path.clone(),
            free_bytes: free.bytes,
            keep_free_bytes: guard.keep_free_bytes,
        });
    }
    if guard.keep_free_inodes > 0 && free.inodes <= guard.keep_free_inodes {
        return Err(JailError::InodesLow {
            path: guard.path.clone(),
            free_inodes: free.inodes,
            keep_free_inodes: guard.keep_free_inodes,
        });
    }
    Ok(guard.budget_bytes.map_or(room, |budget| budget.min(room)))
}

/// The watch of one run.
#[derive(Debug)]
pub(crate) struct DiskWatch {
    guard: DiskGuard,
    free_bytes_at_start: u64,
}

impl DiskWatch {
    pub(crate) fn start(guard: &DiskGuard) -> Result<DiskWatch> {
        Ok(DiskWatch {
            guard: guard.clone(),
            free_bytes_at_start: free(guard)?.bytes,
        })
    }

    /// Has the run gone past what it may take? A filesystem that cannot be read any more counts
    /// as full: the guard fails closed.
    pub(crate) fn exceeded(&self) -> bool {
        let Ok(free) = free(&self.guard) else {
            return true;
        };
        let used = self.free_bytes_at_start.saturating_sub(free.bytes);
        free.bytes < self.guard.keep_free_bytes
            || free.inodes < self.guard.keep_free_inodes
            || self.guard.budget_bytes.is_some_and(|budget| used > budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_margin_beyond_the_free_space_refuses_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let guard = DiskGuard {
            path: dir.path().to_path_buf(),
            keep_free_bytes: u64::MAX,
            keep_free_inodes: 0,
            budget_bytes: None,
        };
        let err = file_size_limit(&guard).unwrap_err().to_string();
        assert!(err.contains("below the"), "{err}");
        assert!(DiskWatch::start(&guard).unwrap().exceeded());
    }

    #[test]
    fn the_budget_caps_a_single_file() {
        let dir = tempfile::tempdir().unwrap();
        let guard = DiskGuard {
            path: dir.path().to_path_buf(),
            keep_free_bytes: 0,
            keep_free_inodes: 0,
            budget_bytes: Some(4096),
        };
        assert_eq!(file_size_limit(&guard).unwrap(), 4096);
        assert!(!DiskWatch::start(&guard).unwrap().exceeded());
    }

    #[test]
    fn an_inode_margin_beyond_the_free_inodes_refuses_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let guard = DiskGuard {
            path: dir.path().to_path_buf(),
            keep_free_bytes: 0,
            keep_free_inodes: u64::MAX,
            budget_bytes: None,
        };
        let err = file_size_limit(&guard).unwrap_err().to_string();
        assert!(err.contains("inodes free"), "{err}");
        assert!(DiskWatch::start(&guard).unwrap().exceeded());
    }

    #[test]
    fn a_vanished_filesystem_counts_as_full() {
        let dir = tempfile::tempdir().unwrap();
        let guard = DiskGuard {
            path: dir.path().to_path_buf(),
            keep_free_bytes: 0,
            keep_free_inodes: 0,
            budget_bytes: None,
        };
        let watch = DiskWatch::start(&guard).unwrap();
        drop(dir);
        assert!(watch.exceeded());
    }
}
