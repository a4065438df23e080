//! A session's own filesystem: a sparse ext4 image of `disk` bytes with room for `files`
//! inodes, loop-mounted where the session's layer lives, so that the kernel holds the layer to
//! both (ENOSPC). Root only: loop devices and ext4 mounts need CAP_SYS_ADMIN in the host's
//! namespace. The device detaches itself when the image is unmounted (LO_FLAGS_AUTOCLEAR), so
//! neither an error nor a crash leaves a loop device behind without a mount holding it.

use std::fs::OpenOptions;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::error::{JailError, PathContext, Result};

/// Where e2fsprogs' mkfs.ext4 is on the distributions airlock runs on (root's PATH may lack
/// sbin, and PATH is not trusted anyway).
const MKFS: [&str; 2] = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"];

/// ext4's own inodes (root, lost+found, the journal…) and the layer's two directories, on top
/// of the `files` a profile asks for.
const RESERVED_INODES: u64 = 16;

/// Can sessions get filesystems of their own here: root, mkfs.ext4, loop devices?
pub fn images_supported(way: crate::privilege::Way) -> bool {
    way.is_rootful()
        && MKFS.iter().any(|p| Path::new(p).exists())
        && Path::new("/dev/loop-control").exists()
}

/// Make the image at `path`: a sparse file of `bytes` and an ext4 filesystem on it with at
/// least `files` inodes for the layer (mkfs.ext4 rounds up to whole inode-table blocks).
pub fn create_image(path: &Path, bytes: u64, files: Option<u64>) -> Result<()> {
    let mkfs = MKFS
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or(JailError::NoMkfs)?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .on_path(
            "create the session's filesystem image",
            path,
            "run 'airlock check'",
        )?;
    file.set_len(bytes).on_path(
        "size the session's filesystem image",
        path,
        "run 'airlock check'",
    )?;
    drop(file);
    let mut cmd = Command::new(mkfs);
    // No blocks reserved for root: the sandbox's writes are what the image is for. Lazy inode
    // tables: the kernel zeroes them later, so a large image is made in milliseconds.
    cmd.args([
        "-q",
        "-F",
        "-m",
        "0",
        "-E",
        "lazy_itable_init=1,lazy_journal_init=1",
    ]);
    if let Some(files) = files {
        cmd.arg("-N")
            .arg(files.saturating_add(RESERVED_INODES).to_string());
    }
    let out = cmd.arg(path).stdin(Stdio::null()).output().on_path(
        "run mkfs.ext4 on",
        path,
        "is e2fsprogs installed?",
    )?;
    if !out.status.success() {
        let _ = std::fs::remove_file(path);
        return Err(JailError::MkfsFailed {
            image: path.to_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(())
}

/// Is a filesystem mounted at `at` (its device differs from its parent's)?
pub fn image_mounted(at: &Path) -> bool {
    let (Ok(dir), Some(Ok(parent))) = (at.metadata(), at.parent().map(Path::metadata)) else {
        return false;
    };
    dir.dev() != parent.dev()
}

/// Mount the image at `at` (an empty directory), nosuid and nodev, unless it already is.
pub fn mount_image(image: &Path, at: &Path) -> Result<()> {
    if image_mounted(at) {
        return Ok(());
    }
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .on_path(
            "open the session's filesystem image",
            image,
            "run 'airlock check'",
        )?;
    let (device, _held_until_mounted) =
        crate::sys::attach_autoclear(&backing).map_err(|errno| JailError::Syscall {
            action: "attach the session's filesystem image to a loop device",
            errno,
            hint:
                "loop devices need root and /dev/loop-control (modprobe loop); run 'airlock check'",
        })?;
    mount(
        Some(&device),
        at,
        Some("ext4"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|errno| JailError::Syscall {
        action: "mount the session's filesystem image",
        errno,
        hint: "is the image damaged (e2fsck -f layer.img)? to drop the session instead, remove its directory in the state directory",
    })
}

/// Unmount the image at `at`, if it is mounted; its loop device detaches itself.
pub fn unmount_image(at: &Path) -> Result<()> {
    if !image_mounted(at) {
        return Ok(());
    }
    // Detached: a process still inside (a shell's cwd) cannot keep the session from going.
    umount2(at, MntFlags::MNT_DETACH).map_err(|errno| JailError::Syscall {
        action: "unmount the session's filesystem image",
        errno,
        hint: "run 'airlock check'",
    })
}
