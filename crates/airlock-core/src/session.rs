//! A session's directories in the state dir: the overlay's upper layer (the change set) and its
//! work dir; and the one mount point every sandbox root is mounted on. A run with `--keep` gets a
//! new session, `--session ID` reuses one; a throwaway run needs none where its layer can live in
//! memory. Sessions as first-class objects (diff, apply, revert) come next.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot {action} {path}: {source} — check the permissions of the state directory, or pass --state-dir")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no session {id} in {dir} — start one with 'airlock run --keep', or omit --session")]
    Unknown { id: String, dir: PathBuf },
    #[error("session {id} belongs to workspace {theirs}, not {ours} — use the session's workspace or a new session")]
    OtherWorkspace {
        id: String,
        theirs: PathBuf,
        ours: PathBuf,
    },
    #[error("invalid session id {0:?}: ids are made of letters, digits and '-'")]
    BadId(String),
}

#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub dir: PathBuf,
    pub workspace: PathBuf,
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SessionError + 'a {
    move |source| SessionError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A short random id: 48 bits from the kernel's generator, in hex.
fn new_id() -> Result<String, SessionError> {
    let mut bytes = [0u8; 6];
    let source = Path::new("/dev/urandom");
    fs::File::open(source)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(io("read", source))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Create `path` (and parents) accessible to its owner only; an existing directory is tightened
/// if it is open to others.
fn make_private_dir(path: &Path) -> Result<(), SessionError> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io("create", path))?;
        }
        Err(e) => return Err(io("create", path)(e)),
    }
    let meta = fs::symlink_metadata(path).map_err(io("inspect", path))?;
    // Someone else's directory (or a symlink to anywhere) would hand them our layers and caches.
    let euid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || std::os::unix::fs::MetadataExt::uid(&meta) != euid {
        return Err(SessionError::Io {
            action: "use",
            path: path.to_path_buf(),
            source: std::io::Error::other(format!(
                "it is not a directory owned by uid {euid}; airlock keeps its state only in a directory of its own"
            )),
        });
    }
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .map_err(io("set permissions of", path))?;
    }
    Ok(())
}

/// The directory every sandbox root is mounted on, each in its own mount namespace: one for all
/// runs, since a mount there is seen only by the run that made it.
pub fn staging_dir(state_dir: &Path) -> Result<PathBuf, SessionError> {
    make_private_dir(state_dir)?;
    let dir = state_dir.join("mnt");
    make_private_dir(&dir)?;
    Ok(dir)
}

impl Session {
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// A new session for `workspace` under `state_dir/sessions`.
    pub fn create(state_dir: &Path, workspace: &Path) -> Result<Session, SessionError> {
        make_private_dir(state_dir)?;
        let sessions = state_dir.join("sessions");
        make_private_dir(&sessions)?;
        let id = new_id()?;
        let dir = sessions.join(&id);
        make_private_dir(&dir)?;
        let session = Session {
            id,
            dir,
            workspace: workspace.to_path_buf(),
        };
        for sub in [session.upper(), session.work()] {
            make_private_dir(&sub)?;
        }
        // The merged workspace root takes its owner and mode from the upper dir: give it the
        // workspace's mode, so the sandbox sees the directory as it is on the host.
        let mode = fs::metadata(workspace)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o755);
        fs::set_permissions(session.upper(), fs::Permissions::from_mode(mode))
            .map_err(io("set permissions of", &session.upper()))?;
        let record = session.dir.join("workspace");
        fs::write(&record, workspace.as_os_str().as_encoded_bytes())
            .map_err(io("write", &record))?;
        Ok(session)
    }

    /// An existing session, which must belong to `workspace`.
    pub fn open(state_dir: &Path, id: &str, workspace: &Path) -> Result<Session, SessionError> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(SessionError::BadId(id.to_string()));
        }
        let sessions = state_dir.join("sessions");
        let dir = sessions.join(id);
        let record = dir.join("workspace");
        let theirs = match fs::read(&record) {
            Ok(bytes) => PathBuf::from(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SessionError::Unknown {
                    id: id.to_string(),
                    dir: sessions,
                })
            }
            Err(e) => return Err(io("read", &record)(e)),
        };
        if theirs != workspace {
            return Err(SessionError::OtherWorkspace {
                id: id.to_string(),
                theirs,
                ours: workspace.to_path_buf(),
            });
        }
        Ok(Session {
            id: id.to_string(),
            dir,
            workspace: theirs,
        })
    }

    /// Hand the layer directories to the host uid the sandbox runs as (needed when airlock runs as
    /// root and the sandbox user is a dedicated uid).
    pub fn chown_layer(&self, uid: u32, gid: u32) -> Result<(), SessionError> {
        for dir in [self.dir.clone(), self.upper(), self.work()] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(io("chown", &dir))?;
        }
        Ok(())
    }

    /// Delete the session and its layer.
    pub fn remove(self) -> Result<(), SessionError> {
        // overlayfs leaves a mode-000 directory in its work dir; open it, and only if something
        // else the sandbox made stands in the way, open up the whole tree.
        let _ = fs::set_permissions(self.work().join("work"), fs::Permissions::from_mode(0o700));
        if fs::remove_dir_all(&self.dir).is_ok() {
            return Ok(());
        }
        fn open_up(path: &Path) {
            if let Ok(meta) = fs::symlink_metadata(path) {
                if meta.is_dir() {
                    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
                    if let Ok(entries) = fs::read_dir(path) {
                        for entry in entries.flatten() {
                            open_up(&entry.path());
                        }
                    }
                }
            }
        }
        open_up(&self.dir);
        fs::remove_dir_all(&self.dir).map_err(io("remove", &self.dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_remove() {
        let state = tempfile::tempdir().unwrap();
        let ws = Path::new("/some/workspace");
        let session = Session::create(state.path(), ws).unwrap();
        assert!(session.upper().is_dir() && session.work().is_dir());
        let again = Session::open(state.path(), &session.id, ws).unwrap();
        assert_eq!(again.dir, session.dir);
        assert!(matches!(
            Session::open(state.path(), &session.id, Path::new("/other")),
            Err(SessionError::OtherWorkspace { .. })
        ));
        assert!(matches!(
            Session::open(state.path(), "nope", ws),
            Err(SessionError::Unknown { .. })
        ));
        assert!(matches!(
            Session::open(state.path(), "../x", ws),
            Err(SessionError::BadId(_))
        ));
        fs::create_dir(session.work().join("work")).unwrap();
        fs::set_permissions(
            session.work().join("work"),
            fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        session.clone().remove().unwrap();
        assert!(!session.dir.exists());
    }
}
