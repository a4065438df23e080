//! Carrying out a [`MountStep`] list: the thin layer of `rootfs` that makes the system calls.
//! Each step is one function; the order is the plan's.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statvfs::{fstatvfs, FsFlags};
use nix::unistd::{chdir, pivot_root};

use super::plan::{HostFacts, MountStep, SystemDir};
use super::{io_error, Places, SYSTEM_BIND};
use crate::beneath::{fd_path, relative, Kind, Tree};
use crate::error::{JailError, PathContext, Result, UNEXPECTED};
use crate::spec::ChangeLayer;
use crate::sys::{self, mount_setattr, MountAttrs};

/// The host as it is, for [`super::plan`].
pub(crate) struct Host;

impl HostFacts for Host {
    fn system_dir(&self, path: &Path) -> Result<SystemDir> {
        Ok(match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                SystemDir::Symlink(fs::read_link(path).map_err(|e| io_error("read link", path, e))?)
            }
            Ok(meta) if meta.is_dir() => SystemDir::Dir,
            _ => SystemDir::Absent,
        })
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn is_file(&self, path: &Path) -> bool {
        fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
    }

    fn kind(&self, path: &Path) -> Result<Kind> {
        let meta = fs::metadata(path).map_err(|e| io_error("bind", path, e))?;
        Ok(if meta.is_dir() { Kind::Dir } else { Kind::File })
    }
}

/// Carry out `steps` in order. `lower_idmap`, as root: the user namespace that idmaps the
/// workspace (see [`MountStep::Workspace`]).
pub(crate) fn execute(
    steps: &[MountStep],
    places: &Places,
    lower_idmap: Option<&OwnedFd>,
) -> Result<()> {
    let staging = places.staging;
    // SECURITY: opened at the first step that finds its mount point with RESOLVE_IN_ROOT; the
    // base tree is airlock's own, and its paths are joined to `staging` as they are.
    let mut tree: Option<Tree> = None;
    for step in steps {
        match step {
            MountStep::MakePrivate => make_private()?,
            MountStep::StagingTmpfs => staging_tmpfs(places)?,
            MountStep::RootTmpfs => root_tmpfs(staging)?,
            MountStep::BindSystem { path, attrs } => bind_system(staging, path, *attrs)?,
            MountStep::BindEtc { attrs } => bind_etc(places, *attrs)?,
            MountStep::Symlink { at, target } => {
                let dst = inside(staging, at)?;
                symlink(target, &dst).map_err(|e| io_error("create", &dst, e))?
            }
            MountStep::Dir(at) => {
                let dst = inside(staging, at)?;
                fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?
            }
            MountStep::WriteFile { at, contents } => write_file(staging, at, contents)?,
            MountStep::BindFileOver { source, at } => bind_file_over(staging, source, at)?,
            MountStep::Tmpfs { at, flags, options } => {
                tmpfs(&inside(staging, at)?, *flags, options)?
            }
            MountStep::Device { name } => device(staging, name)?,
            MountStep::Devpts => devpts(staging)?,
            MountStep::Proc => proc_fs(staging)?,
            MountStep::Restrict { at, attrs } => {
                let dst = inside(staging, at)?;
                mount_setattr(&dst, *attrs, true).on_path("make read-only", &dst, UNEXPECTED)?
            }
            MountStep::BindProfile { path, kind, attrs } => {
                bind_profile_path(opened(&mut tree, staging)?, path, *kind, *attrs)?
            }
            MountStep::Workspace {
                lower,
                layer,
                userxattr,
            } => {
                let tree = opened(&mut tree, staging)?;
                workspace_overlay(places, tree, lower, layer, *userxattr, lower_idmap)?
            }
            MountStep::Hide { path } => hide(opened(&mut tree, staging)?, staging, path)?,
            MountStep::Pivot => enter(staging)?,
            MountStep::SealRoot { attrs } => mount_setattr(Path::new("/"), *attrs, false).on_path(
                "make read-only",
                "/",
                UNEXPECTED,
            )?,
        }
    }
    Ok(())
}

/// The tree being built, opened once.
fn opened<'t>(tree: &'t mut Option<Tree>, staging: &Path) -> Result<&'t Tree> {
    match tree {
        Some(tree) => Ok(tree),
        None => Ok(tree.insert(Tree::open(staging)?)),
    }
}

/// `staging` + an absolute path inside the sandbox, for the parts of the tree airlock builds
/// itself (no sandbox ever wrote there).
pub(super) fn inside(staging: &Path, path: &Path) -> Result<PathBuf> {
    Ok(staging.join(relative(path)?))
}

fn make_private() -> Result<()> {
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
    )
}

fn staging_tmpfs(places: &Places) -> Result<()> {
    mount(
        Some("tmpfs"),
        places.host_dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=16k"),
    )
    .on_path(
        "mount the staging tmpfs on",
        places.host_dir,
        "is the state directory on a normal filesystem? run 'airlock check'",
    )?;
    for dir in [places.staging, places.scratch] {
        fs::create_dir(dir).map_err(|e| io_error("create", dir, e))?;
    }
    Ok(())
}

fn root_tmpfs(staging: &Path) -> Result<()> {
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
    )
}

/// A host directory of the system part at the same path inside.
fn bind_system(staging: &Path, host: &Path, attrs: MountAttrs) -> Result<()> {
    let dst = inside(staging, host)?;
    fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?;
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
    mount_setattr(&dst, attrs, true).on_path("restrict bind of", host, UNEXPECTED)
}

/// /etc: the prepared directory (see `etc`); the live directories are bound on top of it by
/// steps of their own.
fn bind_etc(places: &Places, attrs: MountAttrs) -> Result<()> {
    let dst = places.staging.join("etc");
    fs::create_dir_all(&dst).map_err(|e| io_error("create", &dst, e))?;
    mount(
        Some(places.etc),
        &dst,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .on_path(
        "bind the sandbox /etc from",
        places.etc,
        "check the state directory",
    )?;
    mount_setattr(&dst, attrs, false).on_path("restrict", &dst, UNEXPECTED)
}

/// A file of airlock's own in the root tmpfs: no sandbox has run yet, nothing there to follow.
fn write_file(staging: &Path, at: &Path, contents: &str) -> Result<()> {
    let dst = inside(staging, at)?;
    fs::write(&dst, contents).map_err(|e| io_error("write", &dst, e))?;
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o644))
        .map_err(|e| io_error("set the mode of", &dst, e))
}

/// `source` bound over `at`, both inside the new root and airlock's or the host's own (a live
/// system directory): read-only, nosuid, nodev.
fn bind_file_over(staging: &Path, source: &Path, at: &Path) -> Result<()> {
    let (src, dst) = (inside(staging, source)?, inside(staging, at)?);
    mount(
        Some(&src),
        &dst,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .on_path("bind the run's CA bundle over", at, UNEXPECTED)?;
    mount_setattr(&dst, SYSTEM_BIND, false).on_path("restrict", at, UNEXPECTED)
}

fn tmpfs(dst: &Path, flags: MsFlags, options: &str) -> Result<()> {
    fs::create_dir_all(dst).map_err(|e| io_error("create", dst, e))?;
    mount(Some("tmpfs"), dst, Some("tmpfs"), flags, Some(options)).on_path(
        "mount tmpfs on",
        dst,
        "run 'airlock check'",
    )
}

fn device(staging: &Path, name: &str) -> Result<()> {
    let host = Path::new("/dev").join(name);
    let dst = staging.join("dev").join(name);
    fs::write(&dst, b"").map_err(|e| io_error("create", &dst, e))?;
    mount(
        Some(&host),
        &dst,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .on_path("bind device", &host, "is /dev a devtmpfs on this host?")
    // SECURITY: the host's own inode, root's: a sandbox whose uid is root's (a container's root,
    // in a user namespace) owns it, and Landlock does not cover chmod, chown or utimes. Made
    // read-only with /dev (its `Restrict` step, recursive), its metadata cannot change; a
    // device's reads and writes do not need a writable mount.
}

fn devpts(staging: &Path) -> Result<()> {
    let pts = staging.join("dev/pts");
    fs::create_dir_all(&pts).map_err(|e| io_error("create", &pts, e))?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .on_path("mount a private devpts on", &pts, "run 'airlock check'")
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
    )?;
    hide_root_only_proc_files(staging, &proc_dir)?;
    // SECURITY: a third wall, behind Landlock and the sandbox user's uid: the kernel's settings
    // and its SysRq trigger are root's to write by their owner's permissions alone, with no
    // capability checked (a container's root, which runs the sandbox as its own uid 0, is such
    // a root); bound read-only over themselves, and seccomp refuses the remount.
    // A kernel without CONFIG_MAGIC_SYSRQ has no trigger.
    for entry in ["sys", "sysrq-trigger"] {
        let at = proc_dir.join(entry);
        if entry != "sys" && !at.exists() {
            continue;
        }
        mount(Some(&at), &at, None::<&str>, MsFlags::MS_BIND, None::<&str>).on_path(
            "bind over itself",
            &at,
            UNEXPECTED,
        )?;
        mount_setattr(&at, SYSTEM_BIND, false).on_path("make read-only", &at, UNEXPECTED)?;
    }
    Ok(())
}

/// SECURITY: the files of /proc that only their owner, root, may read (slabinfo, kpageflags,
/// kpagecount, vmallocinfo, pagetypeinfo: the kernel's memory; timer_list: the host's processes by
/// name and pid) are read by owner's permission alone, with no capability checked: a sandbox
/// whose uid is root's (a container's root) would. /dev/null over each, read-only and nodev, so
/// it cannot be opened. Write-only files (sysrq-trigger) are made read-only by the caller.
///
/// PERF: only regular files are looked at (the directory entry's type says which, without a
/// stat), each stat'd by name in the open directory; the first hidden file is made read-only and
/// nodev, and the others are bound from it: a bind mount takes its source's flags, so each is
/// one `mount` instead of two calls.
fn hide_root_only_proc_files(staging: &Path, proc_dir: &Path) -> Result<()> {
    let mut hider: Option<PathBuf> = None;
    let entries = fs::read_dir(proc_dir).map_err(|e| io_error("list", proc_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", proc_dir, e))?;
        // Directories (processes, sys, net) and links (self, mounts) are not hidden this way.
        if !entry.file_type().is_ok_and(|kind| kind.is_file()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue; // gone: nothing to hide
        };
        let mode = meta.permissions().mode();
        if mode & 0o400 == 0 || mode & 0o044 != 0 {
            continue;
        }
        let at = entry.path();
        let source = match &hider {
            Some(hidden) => hidden.clone(),
            None => staging.join("dev/null"),
        };
        mount(
            Some(&source),
            &at,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .on_path("hide", &at, UNEXPECTED)?;
        if hider.is_none() {
            mount_setattr(&at, SYSTEM_BIND, false).on_path("hide", &at, UNEXPECTED)?;
            hider = Some(at);
        }
    }
    Ok(())
}

/// overlayfs takes ',' as the option separator and ':' between lower layers; both, and the escape
/// character itself, must be escaped in paths.
fn overlay_escape(path: &Path) -> Result<String> {
    let text = path.to_str().ok_or_else(|| JailError::NotUtf8 {
        path: path.to_owned(),
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
    places: &Places,
    tree: &Tree,
    workspace: &Path,
    layer: &ChangeLayer,
    userxattr: bool,
    lower_idmap: Option<&OwnedFd>,
) -> Result<()> {
    let mount_point = tree.mount_point(workspace, Kind::Dir)?;
    let dst = fd_path(&mount_point);
    // An idmapped view of the workspace, attached only until the overlay holds its own reference.
    let idmapped_lower = match lower_idmap {
        Some(userns) => idmapped_view(places.scratch, workspace, userns)?,
        None => None,
    };
    let lower = idmapped_lower.unwrap_or_else(|| workspace.to_path_buf());
    let (upper, work) = match layer {
        ChangeLayer::Disk { upper, work } => (upper.clone(), work.clone()),
        ChangeLayer::Memory { size_bytes, inodes } => {
            let dir = memory_layer(places, workspace, *size_bytes, *inodes)?;
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
    if userxattr {
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
        workspace,
        "overlayfs needs kernel >= 5.11 in a user namespace, and upper/work dirs on one filesystem that supports user xattrs; run 'airlock check'",
    )?;
    // PERF: the overlay holds its own references to its layers: their mount points, outside the
    // new root, leave with the host's root (see `enter`), not each with an unmount of its own.
    // overlayfs can come up read-only with only a kernel log line to say why; check it did not.
    let merged = tree
        .find(workspace)?
        .ok_or(nix::errno::Errno::ENOENT)
        .on_path("find the mounted workspace at", workspace, UNEXPECTED)?;
    let flags = fstatvfs(&merged).on_path("inspect", workspace, UNEXPECTED)?;
    if flags.flags().contains(FsFlags::ST_RDONLY) {
        return Err(JailError::Path {
            action: "mount writable workspace overlay on",
            path: workspace.to_path_buf(),
            errno: nix::errno::Errno::EROFS,
            hint: "the overlay came up read-only: the upper dir must be owned by the sandbox user and support xattrs",
        });
    }
    Ok(())
}

/// A tmpfs for a throwaway layer, with `upper` (given the workspace's mode, which the merged root
/// shows) and `work`, both owned by the sandbox user.
/// `size=` and `nr_inodes=` are the layer's `disk` and `files` limits, held by the kernel.
fn memory_layer(
    places: &Places,
    workspace: &Path,
    size_bytes: u64,
    inodes: Option<u64>,
) -> Result<PathBuf> {
    let dir = places.scratch.join("layer");
    fs::create_dir_all(&dir).map_err(|e| io_error("create", &dir, e))?;
    let owner = places.owner;
    let mut options = format!(
        "mode=0700,size={size_bytes},uid={},gid={}",
        owner.uid, owner.gid
    );
    if let Some(inodes) = inodes {
        // The tmpfs' root, `upper` and `work` take three of them.
        options.push_str(&format!(",nr_inodes={}", inodes.saturating_add(3)));
    }
    mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .on_path("mount the memory layer on", &dir, "run 'airlock check'")?;
    let mode = fs::metadata(workspace)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755);
    for (name, mode) in [("upper", mode), ("work", 0o700)] {
        let path = dir.join(name);
        fs::create_dir(&path).map_err(|e| io_error("create", &path, e))?;
        std::os::unix::fs::chown(&path, Some(owner.uid), Some(owner.gid))
            .map_err(|e| io_error("chown", &path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .map_err(|e| io_error("chmod", &path, e))?;
    }
    Ok(dir)
}

/// Attach an idmapped clone of `lower` in `scratch`. None when the workspace's filesystem cannot
/// be idmapped (then files keep their owners, readable but not editable by a sandbox user that
/// does not own them).
fn idmapped_view(scratch: &Path, lower: &Path, userns: &OwnedFd) -> Result<Option<PathBuf>> {
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

/// A host path from the profile, bound at the same path inside. SECURITY: cloned, restricted
/// while still detached, then attached on a mount point found inside the tree.
fn bind_profile_path(tree: &Tree, host: &Path, kind: Kind, attrs: MountAttrs) -> Result<()> {
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
