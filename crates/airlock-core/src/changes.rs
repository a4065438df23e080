//! Reading a session's change set: under the session's shared lock, so that no run changes the
//! layer while it is read.

use std::path::{Component, Path, PathBuf};

use airlock_changes::{ChangeSet, ScanError};

use crate::session::{Session, SessionError, SessionLock};

/// Files larger than this are a hazard `apply` asks about.
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("session {id}: {source} — the session's layer may be damaged; 'airlock discard {id}' drops it")]
    Scan { id: String, source: ScanError },
    #[error("the session's profile: [apply] tool_config: {0} — fix the pattern in the profile")]
    ToolPattern(String),
    #[error("{path}: not inside the workspace {workspace} — name paths in the workspace, relative to it or absolute")]
    OutsideWorkspace { path: PathBuf, workspace: PathBuf },
}

/// A session's changes, and the lock that keeps them as read while it is held.
pub struct ReadChanges {
    pub changes: ChangeSet,
    pub workspace: PathBuf,
    pub layer: PathBuf,
    pub _lock: SessionLock,
}

/// Read what `session` changed against its workspace as it is now.
pub fn read_changes(
    session: &mut Session,
    way: airlock_jail::Way,
    on_busy: &dyn Fn(&Session),
) -> Result<ReadChanges, ChangesError> {
    let lock = session.lock_shared(on_busy)?;
    session.check_active()?;
    let workspace = session.existing_workspace(way)?.to_path_buf();
    let layer = session.upper();
    let changes =
        airlock_changes::scan(&layer, &workspace, session.overlay_xattrs()).map_err(|source| {
            ChangesError::Scan {
                id: session.id.clone(),
                source,
            }
        })?;
    Ok(ReadChanges {
        changes,
        workspace,
        layer,
        _lock: lock,
    })
}

/// Paths a person typed, as paths relative to the workspace root: absolute ones must lie in the
/// workspace; relative ones are taken from `cwd` when it is in the workspace, else from the root.
pub fn relative_paths(
    paths: &[PathBuf],
    workspace: &Path,
    cwd: Option<&Path>,
) -> Result<Vec<PathBuf>, ChangesError> {
    let base = match cwd {
        Some(cwd) if cwd.starts_with(workspace) => cwd.to_path_buf(),
        _ => workspace.to_path_buf(),
    };
    paths
        .iter()
        .map(|path| {
            let full = base.join(path);
            let mut normal = PathBuf::new();
            for component in full.components() {
                match component {
                    Component::ParentDir => {
                        normal.pop();
                    }
                    Component::CurDir => {}
                    other => normal.push(other),
                }
            }
            normal
                .strip_prefix(workspace)
                .map(Path::to_path_buf)
                .map_err(|_| ChangesError::OutsideWorkspace {
                    path: path.clone(),
                    workspace: workspace.to_path_buf(),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_relative_to_the_workspace() {
        let ws = Path::new("/w");
        let rel = |paths: &[&str], cwd: Option<&str>| {
            relative_paths(
                &paths.iter().map(PathBuf::from).collect::<Vec<_>>(),
                ws,
                cwd.map(Path::new),
            )
        };
        assert_eq!(
            rel(&["src/a.rs"], None).unwrap(),
            vec![PathBuf::from("src/a.rs")]
        );
        assert_eq!(
            rel(&["a.rs"], Some("/w/src")).unwrap(),
            vec![PathBuf::from("src/a.rs")]
        );
        assert_eq!(
            rel(&["src/a.rs"], Some("/elsewhere")).unwrap(),
            vec![PathBuf::from("src/a.rs")]
        );
        assert_eq!(
            rel(&["/w/docs"], None).unwrap(),
            vec![PathBuf::from("docs")]
        );
        assert_eq!(rel(&["/w"], None).unwrap(), vec![PathBuf::from("")]);
        assert!(rel(&["/etc/passwd"], None).is_err());
        assert!(rel(&["../x"], None).is_err());
        assert!(rel(&["../../x"], Some("/w/src")).is_err());
        assert!(rel(&["/w2/x"], None).is_err());
    }
}
