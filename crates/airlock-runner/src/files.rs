//! The job and result files, in a directory only this user may write. SECURITY: a front end may
//! run as root over a state directory a user named (`--state-dir`): no file is written or read
//! through a symlink or a name planted there, and the directory itself must be this user's own.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

use anyhow::{bail, Context as _};

/// A new file at `path`, 0600, for writing: none may be there already (a symlink included).
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// The file at `path`, read whole, not through a symlink.
pub(crate) fn read_private(path: &Path) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?
        .read_to_end(&mut text)?;
    Ok(text)
}

/// `dir` made if missing (0700), and then a real directory of this user's that no one else may
/// write; its parent must be this user's own directory too.
pub(crate) fn private_dir(dir: &Path) -> anyhow::Result<()> {
    if let Some(parent) = dir.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        check_own(parent, false)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    check_own(dir, true)
}

fn check_own(dir: &Path, private: bool) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot inspect {}", dir.display()))?;
    let euid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() {
        bail!(
            "{} is not a directory (a symlink?): runs keep their files only in a directory of \
             their own — give a state directory that is yours (--state-dir)",
            dir.display()
        );
    }
    if meta.uid() != euid {
        bail!(
            "{} belongs to uid {}, not to this user (uid {euid}): runs keep their files only in \
             a state directory that is yours (--state-dir)",
            dir.display(),
            meta.uid()
        );
    }
    if private && meta.mode() & 0o022 != 0 {
        bail!(
            "{} may be written by others (mode {:o}): make it 0700, or remove it for airlock to \
             make again",
            dir.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn no_file_is_written_or_read_through_a_symlink_or_a_planted_name() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let planted = dir.path().join("1-0.json");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(create_private(&planted).is_err());
        assert!(read_private(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let plain = dir.path().join("2-0.json");
        std::fs::write(&plain, "left").unwrap();
        assert!(create_private(&plain).is_err());
    }

    #[test]
    fn the_results_directory_must_be_a_real_one_of_this_users() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let state = root.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join("serve")).unwrap();
        let refused = private_dir(&state.join("serve")).unwrap_err().to_string();
        assert!(refused.contains("not a directory"), "{refused}");
        let open = root.path().join("open");
        private_dir(&open.join("serve")).unwrap();
        std::fs::set_permissions(
            open.join("serve"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let refused = private_dir(&open.join("serve")).unwrap_err().to_string();
        assert!(refused.contains("written by others"), "{refused}");
        if nix::unistd::geteuid().is_root() {
            // Root over a state directory another user owns (named with --state-dir).
            let theirs = root.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
            let refused = private_dir(&theirs.join("serve")).unwrap_err().to_string();
            assert!(refused.contains("uid 4242"), "{refused}");
        }
    }
}
