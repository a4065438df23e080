//! The longest name and path the host workspace takes. A session's layer may lie on another
//! filesystem, with longer names than the workspace's (eCryptfs takes 143 bytes, ext4 255), and
//! deep enough paths pass the kernel's PATH_MAX beneath the workspace while they did not beneath
//! the layer: written one by one, such a change would fail half way through an apply, and
//! written at all, most tools could not open it by its path. So an apply is refused before it
//! writes anything.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// What the workspace's filesystem and the kernel allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameLimits {
    /// The longest name, in bytes (the filesystem's NAME_MAX, `statvfs`'s `f_namemax`).
    pub name_max: usize,
    /// The longest path a system call takes, in bytes with its closing NUL (PATH_MAX).
    pub path_max: usize,
}

/// A path of the change set that the workspace cannot take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TooLong {
    #[error("cannot apply {}: its name {name:?} is {bytes} bytes, over the {max} bytes a name may have on the workspace's filesystem (NAME_MAX) — nothing was written; rename it in the session (or apply the other paths by naming them)", .path.display())]
    Name {
        path: PathBuf,
        name: String,
        bytes: usize,
        max: usize,
    },
    #[error("cannot apply {}: in the workspace its path is {bytes} bytes, and the kernel takes at most {} (PATH_MAX) — nothing was written; move it higher in the session (or apply the other paths by naming them)", .path.display(), .max - 1)]
    Path {
        path: PathBuf,
        bytes: usize,
        max: usize,
    },
}

/// Is every name of `path` (relative to `workspace`) within `limits`, and the whole path below
/// `workspace` too?
pub fn check(workspace: &Path, limits: NameLimits, path: &Path) -> Result<(), TooLong> {
    for component in path.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        let bytes = name.as_encoded_bytes().len();
        if bytes > limits.name_max {
            return Err(TooLong::Name {
                path: path.to_path_buf(),
                name: shortened(name),
                bytes,
                max: limits.name_max,
            });
        }
    }
    let bytes = workspace.join(path).as_os_str().len();
    if bytes >= limits.path_max {
        return Err(TooLong::Path {
            path: path.to_path_buf(),
            bytes,
            max: limits.path_max,
        });
    }
    Ok(())
}

/// A long name's beginning and end, so that an error stays readable.
fn shortened(name: &OsStr) -> String {
    let text = name.to_string_lossy();
    let chars: Vec<char> = text.chars().collect();
    match chars.len() > 40 {
        true => format!(
            "{}…{}",
            chars[..20].iter().collect::<String>(),
            chars[chars.len() - 20..].iter().collect::<String>()
        ),
        false => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXT4: NameLimits = NameLimits {
        name_max: 255,
        path_max: 4096,
    };

    #[test]
    fn names_and_paths_over_the_limits_are_refused() {
        let ws = Path::new("/srv/app");
        assert_eq!(check(ws, EXT4, Path::new("src/main.rs")), Ok(()));
        let long = "x".repeat(256);
        let err = check(ws, EXT4, &Path::new("src").join(&long).join("f")).unwrap_err();
        assert!(
            matches!(
                err,
                TooLong::Name {
                    bytes: 256,
                    max: 255,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("NAME_MAX"), "{err}");
        assert_eq!(check(ws, EXT4, Path::new(&"x".repeat(255))), Ok(()));
        // eCryptfs: 143 bytes.
        let ecryptfs = NameLimits {
            name_max: 143,
            ..EXT4
        };
        assert!(check(ws, ecryptfs, Path::new(&"é".repeat(72))).is_err());
        // A path just under PATH_MAX with its NUL, and one at it.
        let deep = |len: usize| Path::new(&"d/".repeat(len / 2)).join("f");
        let fits = deep(4096 - ws.as_os_str().len() - 4);
        assert_eq!(
            check(ws, EXT4, &fits),
            Ok(()),
            "{}",
            ws.join(&fits).as_os_str().len()
        );
        let err = check(ws, EXT4, &deep(4096)).unwrap_err();
        assert!(err.to_string().contains("PATH_MAX"), "{err}");
    }
}
