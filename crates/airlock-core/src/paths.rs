//! Where airlock keeps its state: outside every workspace and every sandbox.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("cannot find a state directory: neither XDG_STATE_HOME nor HOME is set — pass --state-dir DIR")]
    NoHome,
    #[error(
        "state directory {0} must be an absolute path — pass --state-dir with an absolute path"
    )]
    Relative(PathBuf),
}

/// The state directory: the explicit one, else `/var/lib/airlock` for root, else
/// `$XDG_STATE_HOME/airlock` (`~/.local/state/airlock`).
pub fn state_dir(
    explicit: Option<&OsStr>,
    is_root: bool,
    xdg_state_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Result<PathBuf, StateDirError> {
    let dir = if let Some(dir) = explicit.filter(|d| !d.is_empty()) {
        PathBuf::from(dir)
    } else if is_root {
        PathBuf::from("/var/lib/airlock")
    } else if let Some(xdg) = xdg_state_home.filter(|d| !d.is_empty()) {
        PathBuf::from(xdg).join("airlock")
    } else if let Some(home) = home.filter(|d| !d.is_empty()) {
        PathBuf::from(home).join(".local/state/airlock")
    } else {
        return Err(StateDirError::NoHome);
    };
    if dir.is_relative() {
        return Err(StateDirError::Relative(dir));
    }
    Ok(dir)
}

/// Hold `path` (made if missing, mode 0600) locked exclusively until the answer is dropped: what
/// serializes the read-change-write of one of the state directory's own files.
pub(crate) fn lock_exclusive(path: &Path) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| std::io::Error::from(errno))
}

/// Hold the lock file `path` of one of the state directory's own files, refused when it is not
/// this user's alone (another user's lock could be held for ever; `risk` says what else).
pub(crate) fn lock_private(
    path: &Path,
    risk: &str,
) -> Result<nix::fcntl::Flock<std::fs::File>, crate::Error> {
    let lock = lock_exclusive(path).map_err(crate::io_failure::io("lock", path))?;
    lock.metadata()
        .and_then(|meta| check_private(path, &meta, risk))
        .map_err(|why| crate::Error::StateUntrusted {
            path: path.to_path_buf(),
            why: why.to_string(),
        })?;
    Ok(lock)
}

/// Replace `path` with `bytes` at once: written beside it (mode 0600), synced, renamed over it.
pub(crate) fn replace_private(path: &Path, bytes: &[u8]) -> Result<(), crate::Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = crate::io_failure::io;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io("write", &temp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &temp))?;
    std::fs::rename(&temp, path).map_err(io("replace", path))?;
    Ok(())
}

/// Refuse a file of the state directory that someone other than this process's user could have
/// written: group- or world-writable, or owned by another user. What it holds decides who gets in
/// (tokens.json: whoever can write it can add a token), so it is trusted only as this user's own;
/// `risk` says what another writer could do.
pub(crate) fn check_private(
    path: &Path,
    meta: &std::fs::Metadata,
    risk: &str,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    check_not_writable_by_others(path, meta, risk)?;
    let mode = meta.mode() & 0o7777;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "it is owned by uid {}, not by this user (uid {me}; mode {mode:04o}): {risk} — 'chown {me} {}' if it is yours, or run airlock as its owner",
            meta.uid(),
            path.display()
        )));
    }
    Ok(())
}

/// Refuse a file its group or everyone may write (whoever owns it).
pub(crate) fn check_not_writable_by_others(
    path: &Path,
    meta: &std::fs::Metadata,
    risk: &str,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "it is {} (mode {mode:04o}, owner uid {}): {risk} — 'chmod 600 {}'",
            if mode & 0o002 != 0 {
                "world-writable"
            } else {
                "group-writable"
            },
            meta.uid(),
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence() {
        let s = |v: &'static str| Some(OsStr::new(v));
        assert_eq!(
            state_dir(s("/x"), true, s("/xdg"), s("/h")).unwrap(),
            PathBuf::from("/x")
        );
        assert_eq!(
            state_dir(None, true, s("/xdg"), s("/h")).unwrap(),
            PathBuf::from("/var/lib/airlock")
        );
        assert_eq!(
            state_dir(None, false, s("/xdg"), s("/h")).unwrap(),
            PathBuf::from("/xdg/airlock")
        );
        assert_eq!(
            state_dir(None, false, s(""), s("/h")).unwrap(),
            PathBuf::from("/h/.local/state/airlock")
        );
        assert!(matches!(
            state_dir(None, false, None, None),
            Err(StateDirError::NoHome)
        ));
        assert!(matches!(
            state_dir(s("rel"), false, None, None),
            Err(StateDirError::Relative(_))
        ));
    }
}
