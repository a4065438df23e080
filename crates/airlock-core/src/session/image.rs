//! A session's own filesystem (see [`LayerImage`]): made with the session, mounted while it
//! exists (again on demand after a reboot), unmounted and deleted with its layer.

use std::fs;
use std::path::PathBuf;

use super::{make_private_dir, LayerImage, Lifecycle, Session, SessionError};
use crate::io_failure::io;

impl Session {
    pub(super) fn image_path(&self) -> PathBuf {
        self.dir.join("layer.img")
    }
    fn image_error(&self) -> impl FnOnce(airlock_jail::JailError) -> SessionError + '_ {
        move |source| SessionError::Image {
            id: self.id.clone(),
            source,
        }
    }

    /// Make and mount the session's own filesystem.
    pub(super) fn make_image(&self, image: LayerImage) -> Result<(), SessionError> {
        let at = self.layer_root();
        make_private_dir(&at)?;
        airlock_jail::image::create_image(&self.image_path(), image.bytes, image.files)
            .map_err(self.image_error())?;
        airlock_jail::image::mount_image(&self.image_path(), &at).map_err(self.image_error())
    }

    /// Mount the session's own filesystem where it is not (after a reboot), so that its layer
    /// is never read as empty. Only root can, and only root's sessions have one.
    pub(super) fn mount_layer(&self) -> Result<(), SessionError> {
        let active = self.meta.lifecycle != Lifecycle::Discarded;
        if self.meta.image.is_some() && active && self.meta.way.is_rootful() {
            // mount(2) follows a symlink: the image goes on the session's own directory only.
            let at = self.layer_root();
            if fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(SessionError::Damaged {
                    id: self.id.clone(),
                    path: at,
                    why: "its layer is a symlink: discard the session".into(),
                });
            }
            airlock_jail::image::mount_image(&self.image_path(), &self.layer_root())
                .map_err(self.image_error())?;
        }
        Ok(())
    }

    /// Unmount and delete the session's own filesystem, if it has one.
    pub(super) fn drop_image(&self) -> Result<(), SessionError> {
        if self.meta.image.is_none() {
            return Ok(());
        }
        airlock_jail::image::unmount_image(&self.layer_root()).map_err(self.image_error())?;
        match fs::remove_file(self.image_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io("remove", &self.image_path())(e).into())
            }
            _ => Ok(()),
        }
    }
}

/// A session directory with no record (`meta.json`): what a `session new` killed before it saved
/// one leaves behind, perhaps with its own filesystem still mounted. Nothing can load it, so
/// `gc` removes it; only once it is older than [`UNFINISHED_AGE`], so that a session being made
/// right now is never taken.
#[derive(Debug)]
pub struct Unfinished {
    pub id: String,
    dir: PathBuf,
}

/// Far longer than making a session takes (a filesystem image: well under a second).
pub(super) const UNFINISHED_AGE: std::time::Duration = std::time::Duration::from_secs(600);

impl Unfinished {
    /// The session directories under `sessions` without a record, older than [`UNFINISHED_AGE`].
    pub(super) fn under(sessions: &std::path::Path) -> Vec<Unfinished> {
        let Ok(entries) = fs::read_dir(sessions) else {
            return Vec::new();
        };
        let old_enough = |meta: &fs::Metadata| {
            meta.modified()
                .ok()
                .and_then(|at| at.elapsed().ok())
                .is_some_and(|age| age >= UNFINISHED_AGE)
        };
        entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|entry| !entry.path().join("meta.json").exists())
            .filter(|entry| entry.metadata().is_ok_and(|m| old_enough(&m)))
            .map(|entry| Unfinished {
                id: entry.file_name().to_string_lossy().into_owned(),
                dir: entry.path(),
            })
            .collect()
    }

    /// Unmount its filesystem if it has one mounted, then remove the directory.
    pub fn remove(self) -> Result<(), SessionError> {
        let layer = self.dir.join("layer");
        airlock_jail::image::unmount_image(&layer).map_err(|source| SessionError::Image {
            id: self.id.clone(),
            source,
        })?;
        super::remove_tree(&self.dir)
    }
}
