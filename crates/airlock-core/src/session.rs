//! Sessions: a workspace's copy-on-write layer kept in the state dir across runs, with what it is
//! (`meta.json`) and a lock that serializes everything that touches the layer.
//!
//! ```text
//! STATE/sessions/ID/meta.json   id, name, profile, workspace, times, lifecycle (written atomically)
//! STATE/sessions/ID/lock        flock: exclusive while a run, apply or discard works on the layer,
//!                               shared while a diff reads it
//! STATE/sessions/ID/upper       the overlay's upper layer: the change set
//! STATE/sessions/ID/work        the overlay's work dir
//! STATE/sessions/ID/placeholders.json  its secrets' placeholders, 0600 (see crate::secrets)
//! STATE/mnt                     the one mount point every sandbox root is mounted on
//! ```

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_jail::Way;
use nix::fcntl::{Flock, FlockArg};

use crate::io_failure::io;

#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub dir: PathBuf,
    pub meta: SessionMeta,
}

/// A held session lock; released when dropped.
#[derive(Debug)]
pub struct SessionLock {
    _lock: Flock<fs::File>,
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A short random id: 48 bits from the kernel's generator, in hex.
fn new_id() -> Result<String, SessionError> {
    let mut bytes = [0u8; 6];
    let source = Path::new("/dev/urandom");
    fs::File::open(source)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(io("read", source))?;
    Ok(hex::encode(bytes))
}

/// Ids and names become directory names and command-line words: keep them plain.
fn check_id(id: &str) -> Result<(), SessionError> {
    let plain = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with(['.', '-'])
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        Ok(())
    } else {
        Err(SessionError::BadId(id.to_string()))
    }
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
        Err(e) => return Err(io("create", path)(e).into()),
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

fn sessions_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("sessions")
}

/// Write `data` to `path` so that a reader sees the old or the new content, never a part.
fn write_atomically(path: &Path, data: &[u8]) -> Result<(), SessionError> {
    let temp = path.with_extension("tmp");
    let mut file = fs::File::create(&temp).map_err(io("write", &temp))?;
    file.write_all(data)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &temp))?;
    fs::rename(&temp, path).map_err(io("replace", path))?;
    Ok(())
}

/// What `Session::create` needs to know.
#[derive(Debug, Clone)]
pub struct NewSession<'a> {
    pub workspace: &'a Path,
    pub name: Option<&'a str>,
    pub profile: ProfileRef,
    /// Give the layer a filesystem of its own (root only).
    pub image: Option<LayerImage>,
    /// The token whose request makes it.
    pub token: Option<String>,
    /// The way its runs are made, which its layer is then always read by.
    pub way: Way,
}

impl Session {
    pub fn upper(&self) -> PathBuf {
        self.layer_root().join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.layer_root().join("work")
    }
    /// Where `upper` and `work` live: the session's directory, or its own filesystem's mount.
    fn layer_root(&self) -> PathBuf {
        match self.meta.image {
            Some(_) => self.dir.join("layer"),
            None => self.dir.clone(),
        }
    }
    fn meta_path(&self) -> PathBuf {
        self.dir.join("meta.json")
    }
    fn lock_path(&self) -> PathBuf {
        self.dir.join("lock")
    }

    fn killed_path(&self) -> PathBuf {
        self.dir.join("killed")
    }

    /// Note that the session was killed now ('airlock kill'): runs that were waiting for it
    /// then must not start (see [`Session::check_not_killed_since`]).
    pub fn mark_killed(&self) -> Result<(), SessionError> {
        let path = self.killed_path();
        write_atomically(&path, crate::ledger::now_ns().to_string().as_bytes())
    }

    /// Refuse if the session was killed after `since` (when this caller started waiting).
    pub fn check_not_killed_since(&self, since: i128) -> Result<(), SessionError> {
        let killed = fs::read_to_string(self.killed_path())
            .ok()
            .and_then(|text| text.trim().parse::<i128>().ok());
        match killed {
            Some(at) if at >= since => Err(SessionError::KilledWhileWaiting {
                id: self.id.clone(),
            }),
            _ => Ok(()),
        }
    }
    pub fn workspace(&self) -> &Path {
        &self.meta.workspace
    }

    /// A new session for `new.workspace` under `state_dir/sessions`. Costs the same whatever the
    /// size of the workspace: nothing of it is copied.
    pub fn create(state_dir: &Path, new: NewSession) -> Result<Session, SessionError> {
        if let Some(name) = new.name {
            check_id(name)?;
            let taken = Session::list(state_dir)?.into_iter().any(|s| {
                s.meta.lifecycle != Lifecycle::Discarded
                    && (s.meta.name.as_deref() == Some(name) || s.id == name)
            });
            if taken {
                return Err(SessionError::NameTaken(name.to_string()));
            }
        }
        make_private_dir(state_dir)?;
        let sessions = sessions_dir(state_dir);
        make_private_dir(&sessions)?;
        let id = new_id()?;
        let dir = sessions.join(&id);
        make_private_dir(&dir)?;
        let session = Session {
            id: id.clone(),
            dir,
            meta: SessionMeta {
                id,
                name: new.name.map(str::to_string),
                profile: new.profile,
                workspace: new.workspace.to_path_buf(),
                created: now(),
                last_run: None,
                runs: 0,
                lifecycle: Lifecycle::Active,
                ended: None,
                image: new.image,
                token: new.token,
                way: new.way,
            },
        };
        let made = session.make_layer(new.workspace);
        if made.is_err() {
            // Nothing of a session that could not be made is left: no mount, no loop device.
            let _ = session.drop_image();
            let _ = remove_tree(&session.dir);
        }
        made?;
        Ok(session)
    }

    fn make_layer(&self, workspace: &Path) -> Result<(), SessionError> {
        let session = self;
        if let Some(image) = session.meta.image {
            session.make_image(image)?;
        }
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
        fs::File::create(session.lock_path()).map_err(io("create", &session.lock_path()))?;
        session.save()
    }

    fn load(dir: PathBuf) -> Result<Session, SessionError> {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_own_directory(&id, &dir)?;
        let path = dir.join("meta.json");
        let text = fs::read(&path).map_err(io("read", &path))?;
        let meta: SessionMeta =
            serde_json::from_slice(&text).map_err(|e| SessionError::Damaged {
                id: id.clone(),
                path: path.clone(),
                why: e.to_string(),
            })?;
        if meta.id != id {
            return Err(SessionError::Damaged {
                id,
                path,
                why: format!("it names session {}", meta.id),
            });
        }
        let session = Session { id, dir, meta };
        session.mount_layer()?;
        Ok(session)
    }

    /// The session called `id_or_name`: an id, or the name given at `session new`.
    pub fn find(state_dir: &Path, id_or_name: &str) -> Result<Session, SessionError> {
        Session::find_among(state_dir, id_or_name, &|_| true)
    }

    /// [`Session::find`], a name looked up only among the sessions `eligible` keeps (an id is
    /// found whatever it names).
    pub fn find_among(
        state_dir: &Path,
        id_or_name: &str,
        eligible: &dyn Fn(&Session) -> bool,
    ) -> Result<Session, SessionError> {
        check_id(id_or_name)?;
        let dir = sessions_dir(state_dir).join(id_or_name);
        if dir.join("meta.json").exists() {
            return Session::load(dir);
        }
        let named: Vec<Session> = Session::list(state_dir)?
            .into_iter()
            .filter(|s| s.meta.name.as_deref() == Some(id_or_name) && eligible(s))
            .collect();
        // A discarded session gives its name back; prefer the one still alive.
        let mut alive: Vec<Session> = named
            .iter()
            .filter(|s| s.meta.lifecycle != Lifecycle::Discarded)
            .cloned()
            .collect();
        let mut candidates = if alive.is_empty() {
            named
        } else {
            std::mem::take(&mut alive)
        };
        match candidates.len() {
            0 => Err(SessionError::Unknown {
                id: id_or_name.to_string(),
                dir: sessions_dir(state_dir),
            }),
            1 => Ok(candidates.remove(0)),
            _ => Err(SessionError::Ambiguous {
                name: id_or_name.to_string(),
                ids: candidates
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Every session in the state dir, oldest first. Damaged ones are skipped (`airlock
    /// sessions` cannot show what it cannot read; `discard ID` still removes them).
    pub fn list(state_dir: &Path) -> Result<Vec<Session>, SessionError> {
        let dir = sessions_dir(state_dir);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read", &dir)(e).into()),
        };
        let mut sessions: Vec<Session> = entries
            .flatten()
            .filter_map(|entry| Session::load(entry.path()).ok())
            .collect();
        sessions.sort_by(|a, b| (a.meta.created, &a.id).cmp(&(b.meta.created, &b.id)));
        Ok(sessions)
    }

    /// Session directories a `session new` that was killed left without a record (see
    /// [`Unfinished`]).
    pub fn unfinished(state_dir: &Path) -> Vec<Unfinished> {
        Unfinished::under(&sessions_dir(state_dir))
    }

    /// Refuse a session that belongs to another workspace.
    pub fn check_workspace(&self, workspace: &Path) -> Result<(), SessionError> {
        if self.meta.workspace != workspace {
            return Err(SessionError::OtherWorkspace {
                id: self.id.clone(),
                theirs: self.meta.workspace.clone(),
                ours: workspace.to_path_buf(),
            });
        }
        Ok(())
    }

    /// The session's workspace, which must still be there.
    ///
    /// SECURITY: it must still be the directory the session was made for, at the canonical path
    /// the rules were checked on: a directory on the way replaced by a symlink would otherwise
    /// turn the session (its runs, its diff, its apply) onto whatever the symlink names.
    pub fn existing_workspace(&self, way: Way) -> Result<&Path, SessionError> {
        self.check_same_way(way)?;
        let path = &self.meta.workspace;
        match path.canonicalize() {
            Ok(real) if real != *path => {
                return Err(SessionError::WorkspaceRedirected {
                    id: self.id.clone(),
                    path: path.clone(),
                    now: real,
                })
            }
            _ => {}
        }
        if !path.is_dir() {
            return Err(SessionError::WorkspaceGone {
                id: self.id.clone(),
                path: self.meta.workspace.clone(),
            });
        }
        Ok(&self.meta.workspace)
    }

    /// SECURITY: a session's layer is read (mounted, diffed, applied) only the way it was made.
    /// The other way reads the other overlay xattrs, which the first way's sandbox may set on
    /// its own files (`user.overlay.opaque` under a rootful overlay): taken for the overlay's,
    /// they would make an apply delete host files the diff read the first way never showed.
    fn check_same_way(&self, way: Way) -> Result<(), SessionError> {
        if self.meta.way == way {
            return Ok(());
        }
        Err(SessionError::OtherWay {
            id: self.id.clone(),
            made: self.meta.way.describe(),
        })
    }

    /// The xattr namespace its layer's overlay keeps whiteouts and opaque marks in.
    pub fn overlay_xattrs(&self) -> airlock_changes::OverlayXattrs {
        match self.meta.way {
            Way::Rootful => airlock_changes::OverlayXattrs::Trusted,
            Way::UserNamespace => airlock_changes::OverlayXattrs::User,
        }
    }

    /// Refuse a session whose layer is gone.
    pub fn check_active(&self) -> Result<(), SessionError> {
        match self.meta.lifecycle {
            Lifecycle::Active => Ok(()),
            Lifecycle::Applied => Err(SessionError::Applied {
                id: self.id.clone(),
            }),
            Lifecycle::Discarded => Err(SessionError::Discarded {
                id: self.id.clone(),
            }),
        }
    }

    pub fn save(&self) -> Result<(), SessionError> {
        let mut text = serde_json::to_vec_pretty(&self.meta).map_err(|e| SessionError::Io {
            action: "encode",
            path: self.meta_path(),
            source: std::io::Error::other(e),
        })?;
        text.push(b'\n');
        write_atomically(&self.meta_path(), &text)
    }

    fn lock(&self, arg: FlockArg, on_wait: &dyn Fn(&Session)) -> Result<SessionLock, SessionError> {
        let path = self.lock_path();
        let open = || {
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io("open", &path))
        };
        let (nonblocking, blocking) = match arg {
            FlockArg::LockShared | FlockArg::LockSharedNonblock => {
                (FlockArg::LockSharedNonblock, FlockArg::LockShared)
            }
            _ => (FlockArg::LockExclusiveNonblock, FlockArg::LockExclusive),
        };
        match Flock::lock(open()?, nonblocking) {
            Ok(lock) => Ok(SessionLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                on_wait(self);
                Flock::lock(open()?, blocking)
                    .map(|lock| SessionLock { _lock: lock })
                    .map_err(|(_, errno)| io("lock", &path)(errno.into()).into())
            }
            Err((_, errno)) => Err(io("lock", &path)(errno.into()).into()),
        }
    }

    /// Hold the session alone (a run, an apply, a discard); `on_wait` is told when another
    /// holds it and this call waits. The metadata is read again once the lock is held.
    pub fn lock_exclusive(
        &mut self,
        on_wait: &dyn Fn(&Session),
    ) -> Result<SessionLock, SessionError> {
        let lock = self.lock(FlockArg::LockExclusive, on_wait)?;
        self.meta = Session::load(self.dir.clone())?.meta;
        Ok(lock)
    }

    /// Hold the session for reading (a diff): no run changes the layer meanwhile.
    pub fn lock_shared(&mut self, on_wait: &dyn Fn(&Session)) -> Result<SessionLock, SessionError> {
        let lock = self.lock(FlockArg::LockShared, on_wait)?;
        self.meta = Session::load(self.dir.clone())?.meta;
        Ok(lock)
    }

    /// What the session is doing now.
    pub fn status(&self) -> SessionStatus {
        match self.meta.lifecycle {
            Lifecycle::Applied => return SessionStatus::Applied,
            Lifecycle::Discarded => return SessionStatus::Discarded,
            Lifecycle::Active => {}
        }
        let busy = fs::File::open(self.lock_path())
            .ok()
            .map(
                |file| match Flock::lock(file, FlockArg::LockSharedNonblock) {
                    Ok(_) => false,
                    Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
                },
            )
            .unwrap_or(false);
        if busy {
            SessionStatus::Running
        } else {
            SessionStatus::Idle
        }
    }

    /// Hand the layer directories to the host uid the sandbox runs as (needed when airlock runs as
    /// root and the sandbox user is a dedicated uid).
    pub fn chown_layer(&self, uid: u32, gid: u32) -> Result<(), SessionError> {
        for dir in [self.upper(), self.work()] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(io("chown", &dir))?;
        }
        Ok(())
    }

    /// Drop the layer and mark the session discarded; its record stays until `gc`. The caller
    /// holds the exclusive lock.
    pub fn discard(&mut self, _lock: &SessionLock) -> Result<(), SessionError> {
        for dir in [self.upper(), self.work()] {
            remove_tree(&dir)?;
        }
        self.drop_image()?;
        self.meta.lifecycle = Lifecycle::Discarded;
        self.meta.ended = Some(now());
        self.save()
    }

    /// Delete the session, record and layer.
    pub fn remove(self) -> Result<(), SessionError> {
        self.drop_image()?;
        remove_tree(&self.dir)
    }
}

/// Remove a directory tree the sandbox wrote, whatever modes it left behind.
fn remove_tree(dir: &Path) -> Result<(), SessionError> {
    // overlayfs leaves a mode-000 directory in its work dir; open it, and only if something
    // else the sandbox made stands in the way, open up the whole tree.
    let _ = fs::set_permissions(dir.join("work"), fs::Permissions::from_mode(0o700));
    match fs::remove_dir_all(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
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
    open_up(dir);
    fs::remove_dir_all(dir).map_err(io("remove", dir))?;
    Ok(())
}

/// SECURITY: a session's record says what its loader mounts (a rootful image) and how its
/// layer is read: only the user who made it may have written it. A session directory of another
/// uid (another user's state directory named with --state-dir), or a symlink, is not loaded.
fn check_own_directory(id: &str, dir: &Path) -> Result<(), SessionError> {
    let meta = fs::symlink_metadata(dir).map_err(io("inspect", dir))?;
    let euid = nix::unistd::geteuid().as_raw();
    let why = if !meta.is_dir() {
        "it is not a directory (a symlink?)".to_string()
    } else if meta.uid() != euid {
        format!(
            "it belongs to uid {}, not to this user (uid {euid}): a session is read only by the \
             user who made it, from their own state directory",
            meta.uid()
        )
    } else {
        return Ok(());
    };
    Err(SessionError::Damaged {
        id: id.to_string(),
        path: dir.to_path_buf(),
        why,
    })
}

mod error;
mod image;
mod meta;
#[cfg(test)]
mod tests;

pub use error::SessionError;
pub use image::Unfinished;
pub use meta::{LayerImage, Lifecycle, ProfileRef, SessionMeta, SessionStatus};
