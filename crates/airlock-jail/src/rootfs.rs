//! The sandbox's view of the filesystem, built on a fresh tmpfs and entered with pivot_root.
//!
//! The order is the argument: nothing of the host is visible unless a step below binds it, every
//! bind of system content is read-only, nosuid and nodev, the workspace is an overlay whose writes
//! land in its layer (a tmpfs for a throwaway run, the session's upper dir otherwise), and the root
//! itself is made read-only at the end.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statvfs::{fstatvfs, FsFlags};
use nix::unistd::{chdir, pivot_root};

use crate::beneath::{fd_path, relative, Kind, Tree};
use crate::error::{JailError, PathContext, Result, UNEXPECTED};
use crate::etc::ETC_BOUND;
use crate::spec::{Bind, Layer, SandboxSpec};
use crate::sys::{self, mount_setattr, MountAttrs};

/// Host directories a shell and common tools need, bound read-only (or re-created as the same
/// symlink on merged-/usr systems).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Device nodes bound from the host's /dev: harmless character devices only.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const SYSTEM_BIND: MountAttrs = MountAttrs {
    read_only: true,
    no_suid: true,
    no_dev: true,
    no_exec: false,
};

/// Owner of the private tmpfs mounts, as the mounting process names it: inside ids when the mount
/// happens in the sandbox's user namespace, host ids when root mounts before entering one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MounterIds {
    pub uid: u32,
    pub gid: u32,
}

pub(crate) struct RootfsPlan<'a> {
    pub spec: &'a SandboxSpec,
    /// Empty directory on the host: a small tmpfs on it holds `staging` and `scratch`.
    pub host_dir: &'a Path,
    /// The new root's mount point (see [`staging_points`]).
    pub staging: &'a Path,
    /// Where the workspace's layers are attached while the overlay is made: outside the new
    /// root, so they leave with the host's root in the one detach of `enter` (every unmount
    /// waits for an RCU grace period, up to ~0.8 ms here; three were one per run).
    pub scratch: &'a Path,
    /// Mounting inside an unprivileged user namespace: overlayfs needs `userxattr` there.
    pub in_user_namespace: bool,
    pub owner: MounterIds,
    /// The prepared /etc directory.
    pub etc: &'a Path,
}

/// The new root's mount point and the scratch directory, in the tmpfs `build_base` mounts on
/// `host_dir`.
pub(crate) fn staging_points(host_dir: &Path) -> (PathBuf, PathBuf) {
    (host_dir.join("root"), host_dir.join("scratch"))
}

/// Build the system part of the tree under `plan.staging`: everything but the workspace and the
/// profile's paths.
pub(crate) fn build_base(plan: &RootfsPlan) -> Result<()> {
    let staging = plan.staging;
    // Mount events must not travel back to the host, nor host events into the sandbox.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .on_path(
        "make mounts private under",
        "/",
        "is this kernel built with mount namespaces? run 'airlock check'",
    )?;
    mount(
        Some("tmpfs"),
        plan.host_dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=16k"),
    )
    .on_path(
        "mount the staging tmpfs on",
        plan.host_dir,
        "is the state directory on a normal filesystem? run 'airlock check'",
    )?;
    for dir in [staging, plan.scratch] {
        fs::create_dir(dir).map_err(|e| io_error("create", dir, e))?;
    }
    mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=8m"),
    )
    .on_path(
        "mount the sandbox root tmpfs on",
        staging,
        "is the state directory on a normal filesystem? run 'airlock check'",
    )?;

    system_dirs(staging)?;
    etc(plan)?;
    dev(staging)?;
    proc_fs(staging)?;
    private_tmpfs(staging, Path::new("/tmp"), plan, 0o1777)?;
    private_tmpfs(staging, &plan.spec.home, plan, 0o700)?;
    fs::create_dir_all(staging.join("var"))
        .map_err(|e| io_error("create", &staging.join("var"), e))?;
    symlink("../tmp", staging.join("var/tmp"))
        .map_err(|e| io_error("create", &staging.join("var/tmp"), e))
}

/// Add the workspace (through `lower_idmap` when given) and the profile's paths, and pivot into
/// the tree. On return `/` is the new root.
pub(crate) fn finish_and_enter(
    plan: &RootfsPlan,
    lower_idmap: Option<&std::os::fd::OwnedFd>,
) -> Result<()> {
    let staging = plan.staging;
    let tree = Tree::open(staging)?;
    // Outer binds before inner ones, so none hides another; binds that contain the workspace
    // before its overlay, binds inside it after; hides last, over everything.
    let mut binds: Vec<&Bind> = plan.spec.binds.iter().collect();
    binds.sort_by_key(|bind| bind.path.components().count());
    let workspace = &plan.spec.workspace.lower;
    let (inner, outer): (Vec<&Bind>, Vec<&Bind>) = binds
        .into_iter()
        .partition(|bind| bind.path.starts_with(workspace));
    for bind in outer {
        bind_profile_path(&tree, bind)?;
    }
    workspace_overlay(plan, &tree, lower_idmap)?;
    for bind in inner {
        bind_profile_path(&tree, bind)?;
    }
    for hidden in &plan.spec.hide {
        hide(&tree, staging, hidden)?;
    }
    enter(staging)?;
    // The root tmpfs holds the mount points and symlinks; nothing may change it now.
    mount_setattr(Path::new("/"), SYSTEM_BIND, false).on_path("make read-only", "/", UNEXPECTED)?;
    Ok(())
}

pub(crate) fn io_error(action: &'static str, path: &Path, e: std::io::Error) -> JailError {
    JailError::Path {
        action,
        path: path.to_path_buf(),
        errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        hint: "check that the path exists and that airlock may use it",
    }
}

/// `staging` + an absolute path inside the sandbox, for the parts of the tree airlock builds
/// itself (no sandbox ever wrote there).
fn inside(staging: &Path, path: &Path) -> Result<PathBuf> {
    Ok(staging.join(relative(path)?))
}

fn system_dirs(staging: &Path) -> Result<()> {
    for dir in SYSTEM_DIRS {
        let host = Path::new(dir);
        match fs::symlink_metadata(host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(host).map_err(|e| io_error("read link", host, e))?;
                let dst = inside(staging, host)?;
                symlink(&target, &dst).map_err(|e| io_error("create", &dst, e))?;
            }
            Ok(meta) if meta.is_dir() => bind_host_path(staging, host)?,
            _ => {}
        }
    }
    Ok(())
}

/// /etc: the prepared directory (see `etc`), and the live directories bound on top of it.
fn etc(plan: &RootfsPlan) -> Result<()> {
    let dst = plan.staging.join("etc");
    fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?;
    mount(
        Some(plan.etc),
        &dst,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .on_path(
        "bind the sandbox /etc from",
        plan.etc,
        "check the state directory",
    )?;
    mount_setattr(&dst, SYSTEM_BIND, false).on_path("restrict", &dst, UNEXPECTED)?;
    for entry in ETC_BOUND {
        let host = Path::new("/etc").join(entry);
        if host.is_dir() {
            bind_host_path(plan.staging, &host)?;
        }
    }
    Ok(())
}

fn dev(staging: &Path) -> Result<()> {
    let dev = staging.join("dev");
    fs::create_dir_all(&dev).map_err(|e| io_error("create", &dev, e))?;
    mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )
    .on_path("mount tmpfs on", &dev, "run 'airlock check'")?;
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        let dst = dev.join(name);
        fs::write(&dst, b"").map_err(|e| io_error("create", &dst, e))?;
        // A single device file: nothing on it can be executed or setuid, so no extra flags.
        mount(
            Some(&host),
            &dst,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .on_path("bind device", &host, "is /dev a devtmpfs on this host?")?;
    }
    let pts = dev.join("pts");
    fs::create_dir_all(&pts).map_err(|e| io_error("create", &pts, e))?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .on_path("mount a private devpts on", &pts, "run 'airlock check'")?;
    let shm = dev.join("shm");
    fs::create_dir_all(&shm).map_err(|e| io_error("create", &shm, e))?;
    mount(
        Some("tmpfs"),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777,size=64m"),
    )
    .on_path("mount tmpfs on", &shm, "run 'airlock check'")?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(target, dev.join(link)).map_err(|e| io_error("create", &dev.join(link), e))?;
    }
    // Its tmpfs is owned by the sandbox user when mounted in a user namespace; read-only, it
    // cannot be changed (a private devpts and /dev/shm are mounts of their own).
    mount_setattr(
        &dev,
        MountAttrs {
            read_only: true,
            no_suid: true,
            no_dev: false,
            no_exec: true,
        },
        false,
    )
    .on_path("make read-only", &dev, UNEXPECTED)?;
    Ok(())
}

fn proc_fs(staging: &Path) -> Result<()> {
    let proc_dir = staging.join("proc");
    fs::create_dir_all(&proc_dir).map_err(|e| io_error("create", &proc_dir, e))?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .on_path(
        "mount a private /proc on",
        &proc_dir,
        "a new procfs needs a fully visible /proc on the host (no masked paths, as in some containers)",
    )
}

fn private_tmpfs(staging: &Path, path: &Path, plan: &RootfsPlan, mode: u32) -> Result<()> {
    let dst = inside(staging, path)?;
    fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?;
    let options = format!(
        "mode={mode:o},size={},uid={},gid={}",
        plan.spec.limits.tmp_bytes, plan.owner.uid, plan.owner.gid
    );
    mount(
        Some("tmpfs"),
        &dst,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .on_path("mount tmpfs on", &dst, "run 'airlock check'")
}

/// overlayfs takes ',' as the option separator and ':' between lower layers; both, and the escape
/// character itself, must be escaped in paths.
fn overlay_escape(path: &Path) -> Result<String> {
    let text = path.to_str().ok_or_else(|| {
        JailError::Invalid(format!(
            "workspace path {} is not valid UTF-8",
            path.display()
        ))
    })?;
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    Ok(out)
}

fn workspace_overlay(
    plan: &RootfsPlan,
    tree: &Tree,
    lower_idmap: Option<&std::os::fd::OwnedFd>,
) -> Result<()> {
    let ws = &plan.spec.workspace;
    let mount_point = tree.mount_point(&ws.lower, Kind::Dir)?;
    let dst = fd_path(&mount_point);
    // An idmapped view of the workspace, attached only until the overlay holds its own reference.
    let idmapped_lower = match lower_idmap {
        Some(userns) => idmapped_view(plan.scratch, &ws.lower, userns)?,
        None => None,
    };
    let lower = idmapped_lower.unwrap_or_else(|| ws.lower.clone());
    let (upper, work) = match &ws.layer {
        Layer::Disk { upper, work } => (upper.clone(), work.clone()),
        Layer::Memory { size_bytes } => {
            let dir = memory_layer(plan, *size_bytes)?;
            (dir.join("upper"), dir.join("work"))
        }
    };
    // Every change lands in the upper layer whole, as airlock's diff and apply read it: no
    // metadata-only copy-up whose data stays below, no redirect xattrs for renamed directories
    // (a rename of a host directory copies it instead), whatever the module's defaults.
    let mut options = format!(
        "lowerdir={},upperdir={},workdir={},metacopy=off,redirect_dir=nofollow,index=off",
        overlay_escape(&lower)?,
        overlay_escape(&upper)?,
        overlay_escape(&work)?
    );
    if plan.in_user_namespace {
        options.push_str(",userxattr");
    }
    mount(
        Some("overlay"),
        &dst,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .on_path(
        "mount the workspace overlay on",
        &ws.lower,
        "overlayfs needs kernel >= 5.11 in a user namespace, and upper/work dirs on one filesystem that supports user xattrs; run 'airlock check'",
    )?;
    // The overlay holds its own references to its layers: their mount points, outside the new
    // root, leave with the host's root (see `enter`), not each with an unmount of its own.
    // overlayfs can come up read-only with only a kernel log line to say why; check it did not.
    let merged = tree
        .find(&ws.lower)?
        .ok_or(nix::errno::Errno::ENOENT)
        .on_path("find the mounted workspace at", &ws.lower, UNEXPECTED)?;
    let flags = fstatvfs(&merged).on_path("inspect", &ws.lower, UNEXPECTED)?;
    if flags.flags().contains(FsFlags::ST_RDONLY) {
        return Err(JailError::Path {
            action: "mount writable workspace overlay on",
            path: ws.lower.clone(),
            errno: nix::errno::Errno::EROFS,
            hint: "the overlay came up read-only: the upper dir must be owned by the sandbox user and support xattrs",
        });
    }
    Ok(())
}

/// A tmpfs for a throwaway layer, with `upper` (given the workspace's mode, which the merged root
/// shows) and `work`, both owned by the sandbox user.
fn memory_layer(plan: &RootfsPlan, size_bytes: u64) -> Result<PathBuf> {
    let dir = plan.scratch.join("layer");
    fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
    let options = format!(
        "mode=0700,size={size_bytes},uid={},gid={}",
        plan.owner.uid, plan.owner.gid
    );
    mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .on_path("mount the memory layer on", &dir, "run 'airlock check'")?;
    let mode = fs::metadata(&plan.spec.workspace.lower)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    for (name, mode) in [("upper", mode), ("work", 0o700)] {
        let path = dir.join(name);
        fs::create_dir(&path).map_err(|e| io_error("create", &path, e))?;
        std::os::unix::fs::chown(&path, Some(plan.owner.uid), Some(plan.owner.gid))
            .map_err(|e| io_error("chown", &path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .map_err(|e| io_error("chmod", &path, e))?;
    }
    Ok(dir)
}

/// Attach an idmapped clone of `lower` in `scratch`. None when the workspace's filesystem cannot
/// be idmapped (then files keep their owners, readable but not editable by a sandbox user that
/// does not own them).
fn idmapped_view(
    scratch: &Path,
    lower: &Path,
    userns: &std::os::fd::OwnedFd,
) -> Result<Option<PathBuf>> {
    let tree = sys::open_tree_clone(lower, false).on_path(
        "clone the mount of",
        lower,
        "run 'airlock check'",
    )?;
    match sys::idmap_mount(&tree, userns) {
        Ok(()) => {}
        Err(nix::errno::Errno::EINVAL)
        | Err(nix::errno::Errno::EPERM)
        | Err(nix::errno::Errno::EOPNOTSUPP) => return Ok(None),
        Err(errno) => {
            return Err(JailError::Path {
                action: "idmap the workspace",
                path: lower.to_path_buf(),
                errno,
                hint: UNEXPECTED,
            })
        }
    }
    let view = scratch.join("lower");
    fs::create_dir_all(&view).map_err(|e| io_error("create", &view, e))?;
    sys::move_mount_to(&tree, &view).on_path(
        "attach the idmapped workspace at",
        &view,
        UNEXPECTED,
    )?;
    Ok(Some(view))
}

/// Bind a host path of the system part (read-only, nosuid, nodev) at the same path inside.
fn bind_host_path(staging: &Path, host: &Path) -> Result<()> {
    let dst = inside(staging, host)?;
    let meta = fs::metadata(host).map_err(|e| io_error("bind", host, e))?;
    if meta.is_dir() {
        fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?;
    } else {
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent).map_err(|e| io_error("create", parent, e))?;
        }
        if !dst.exists() {
            fs::write(&dst, b"").map_err(|e| io_error("create", &dst, e))?;
        }
    }
    mount(
        Some(host),
        &dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .on_path(
        "bind",
        host,
        "check that the path exists and is readable by you",
    )?;
    mount_setattr(&dst, SYSTEM_BIND, true).on_path("restrict bind of", host, UNEXPECTED)
}

/// A host path from the profile, bound at the same path inside: cloned, restricted while still
/// detached, then attached on a mount point found inside the tree.
fn bind_profile_path(tree: &Tree, bind: &Bind) -> Result<()> {
    let host = &bind.path;
    let meta = fs::metadata(host).map_err(|e| io_error("bind", host, e))?;
    let kind = if meta.is_dir() { Kind::Dir } else { Kind::File };
    let attrs = MountAttrs {
        read_only: !bind.writable,
        ..SYSTEM_BIND
    };
    let clone = sys::open_tree_clone(host, true).on_path(
        "bind",
        host,
        "check that the path exists and is readable by you",
    )?;
    sys::restrict_tree(&clone, attrs).on_path("restrict bind of", host, UNEXPECTED)?;
    let target = tree.mount_point(host, kind)?;
    sys::move_mount_onto(&clone, &target).on_path("bind", host, UNEXPECTED)
}

/// Make a path inside empty: an empty read-only tmpfs over a directory, /dev/null over a file.
/// A path that does not exist inside needs no hiding.
fn hide(tree: &Tree, staging: &Path, path: &Path) -> Result<()> {
    let Some(target) = tree.find(path)? else {
        return Ok(());
    };
    let is_dir = nix::sys::stat::fstat(&target)
        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        .on_path("inspect", path, UNEXPECTED)?;
    if is_dir {
        mount(
            Some("tmpfs"),
            &fd_path(&target),
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0000,size=4k"),
        )
        .on_path("hide", path, UNEXPECTED)
    } else {
        let null = sys::open_tree_clone(&staging.join("dev/null"), false)
            .on_path("hide", path, UNEXPECTED)?;
        sys::restrict_tree(&null, SYSTEM_BIND).on_path("hide", path, UNEXPECTED)?;
        sys::move_mount_onto(&null, &target).on_path("hide", path, UNEXPECTED)
    }
}

/// pivot_root into `staging` and detach the old root, so no path leads back to the host.
fn enter(staging: &Path) -> Result<()> {
    chdir(staging).on_path("enter", staging, UNEXPECTED)?;
    // Stacking the old root under the new one and detaching it needs no extra directory.
    pivot_root(".", ".").on_path("pivot_root into", staging, "run 'airlock check'")?;
    umount2(".", MntFlags::MNT_DETACH).on_path("detach the host root from", staging, UNEXPECTED)?;
    chdir("/").on_path("enter", "/", UNEXPECTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_paths_escape_separators() {
        assert_eq!(
            overlay_escape(Path::new("/a,b:c\\d")).unwrap(),
            "/a\\,b\\:c\\\\d"
        );
    }

    #[test]
    fn inside_refuses_parent_components() {
        assert!(inside(Path::new("/s"), Path::new("/a/../etc")).is_err());
        assert_eq!(
            inside(Path::new("/s"), Path::new("/a/b")).unwrap(),
            PathBuf::from("/s/a/b")
        );
    }
}
