//! Finding and making mount points inside the tree being built for a sandbox, without ever
//! leaving it.
//!
//! Parts of that tree are written by sandboxes: the workspace layer of a kept session, and
//! read-write binds. A symlink planted there by one run must not lead the next run's setup (as
//! root, before pivot_root) out to the host: every path is resolved with openat2's
//! RESOLVE_IN_ROOT, so symlinks resolve as if the tree were `/`, and mounts are made on the
//! resulting fds rather than on path names that could be swapped in between.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{mkdirat, Mode};

use crate::error::{JailError, PathContext, Result, UNEXPECTED};

pub(crate) struct Tree {
    root: OwnedFd,
}

/// What a mount point must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
}

fn how(flags: OFlag) -> OpenHow {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    // openat2 refuses a mode unless a file may be created.
    if flags.contains(OFlag::O_CREAT) {
        how.mode(Mode::from_bits_truncate(0o644))
    } else {
        how
    }
}

/// `path` (absolute, as seen inside) relative to the tree's root; `..` is refused.
pub(crate) fn relative(path: &Path) -> Result<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(JailError::NotBeneath {
                    path: path.to_owned(),
                })
            }
        }
    }
    Ok(out)
}

impl Tree {
    pub(crate) fn open(staging: &Path) -> Result<Tree> {
        let root = nix::fcntl::open(
            staging,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .on_path("open", staging, UNEXPECTED)?;
        Ok(Tree { root })
    }

    fn at(&self, relative: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
        let target = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        openat2(self.root.as_fd(), target, how(flags))
    }

    /// The object at `path`, if it exists.
    pub(crate) fn find(&self, path: &Path) -> Result<Option<OwnedFd>> {
        match self.at(&relative(path)?, OFlag::O_PATH) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(JailError::Path {
                action: "look up inside the sandbox",
                path: path.to_path_buf(),
                errno,
                hint: UNEXPECTED,
            }),
        }
    }

    /// A mount point at `path`, made (with its parents) if missing. A final component that is a
    /// symlink is refused rather than followed.
    pub(crate) fn mount_point(&self, path: &Path, kind: Kind) -> Result<OwnedFd> {
        let relative = relative(path)?;
        let fail = |action, errno| JailError::Path {
            action,
            path: path.to_path_buf(),
            errno,
            hint: "check the profile's [filesystem] paths against what exists inside the sandbox",
        };
        let mut prefix = PathBuf::new();
        let parts: Vec<_> = relative.components().collect();
        for (i, part) in parts.iter().enumerate() {
            let parent = self
                .at(&prefix, OFlag::O_PATH | OFlag::O_DIRECTORY)
                .map_err(|e| fail("enter", e))?;
            prefix.push(part);
            let last = i + 1 == parts.len();
            if last && kind == Kind::File {
                let file = self
                    .at(
                        &prefix,
                        OFlag::O_CREAT | OFlag::O_RDONLY | OFlag::O_NOFOLLOW,
                    )
                    .map_err(|e| fail("make a mount point at", e))?;
                return Ok(file);
            }
            match mkdirat(
                parent.as_fd(),
                part.as_os_str(),
                Mode::from_bits_truncate(0o755),
            ) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => return Err(fail("make a mount point at", errno)),
            }
            if last {
                return self
                    .at(
                        &prefix,
                        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
                    )
                    .map_err(|e| fail("make a mount point at", e));
            }
        }
        self.at(&prefix, OFlag::O_PATH | OFlag::O_DIRECTORY)
            .map_err(|e| fail("enter", e))
    }
}

/// A path that reaches the object behind `fd`, for mount(2), which takes no fds.
pub(crate) fn fd_path(fd: &OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir, Tree) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let tree = Tree::open(root.path()).unwrap();
        (root, outside, tree)
    }

    #[test]
    fn mount_points_are_made_with_their_parents() {
        let (root, _outside, tree) = tree();
        tree.mount_point(Path::new("/a/b/c"), Kind::Dir).unwrap();
        tree.mount_point(Path::new("/a/f"), Kind::File).unwrap();
        assert!(root.path().join("a/b/c").is_dir());
        assert!(root.path().join("a/f").is_file());
    }

    #[test]
    fn an_absolute_symlink_resolves_inside_the_tree_not_on_the_host() {
        let (root, outside, tree) = tree();
        // A sandbox planted `/dir` -> <host path>; following it must stay in the tree.
        symlink(outside.path(), root.path().join("dir")).unwrap();
        let made = tree.mount_point(&Path::new("/dir").join("sub"), Kind::Dir);
        assert!(
            std::fs::read_dir(outside.path()).unwrap().next().is_none(),
            "wrote on the host"
        );
        // Either refused or made inside the tree, at the symlink's target taken as a tree path.
        if made.is_ok() {
            let inside = root
                .path()
                .join(outside.path().strip_prefix("/").unwrap())
                .join("sub");
            assert!(inside.is_dir());
        }
    }

    #[test]
    fn a_final_symlink_is_refused_as_a_file_mount_point() {
        let (root, outside, tree) = tree();
        let target = outside.path().join("evil");
        symlink(&target, root.path().join("cfg")).unwrap();
        assert!(tree.mount_point(Path::new("/cfg"), Kind::File).is_err());
        assert!(!target.exists(), "created a host file through a symlink");
    }

    #[test]
    fn dot_dot_cannot_climb_out() {
        let (_root, _outside, tree) = tree();
        assert!(tree
            .mount_point(Path::new("/a/../../etc"), Kind::Dir)
            .is_err());
        assert!(tree.find(Path::new("/../etc/passwd")).is_err());
    }

    #[test]
    fn find_reports_missing_paths_as_none() {
        let (root, _outside, tree) = tree();
        assert!(tree.find(Path::new("/nope")).unwrap().is_none());
        std::fs::write(root.path().join("here"), b"").unwrap();
        assert!(tree.find(Path::new("/here")).unwrap().is_some());
    }
}
