//! A session's own filesystem (see [`LayerImage`]): made with the session, mounted while it
//! exists (again on demand after a reboot), unmounted and deleted with its layer.

use std::fs;
use std::path::PathBuf;

use super::{io, make_private_dir, LayerImage, Lifecycle, Session, SessionError};

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
        if self.meta.image.is_some() && active && nix::unistd::geteuid().is_root() {
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
                Err(io("remove", &self.image_path())(e))
            }
            _ => Ok(()),
        }
    }
}
