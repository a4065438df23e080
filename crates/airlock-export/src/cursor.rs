//! How far each destination has been sent: `STATE/export/NAME.cursor`, the last record the
//! destination acknowledged (its seq, hash and byte offset in the log), written only after it did.
//! A crash between the acknowledgement and the write sends that batch again: at-least-once, never
//! a gap. `NAME.lock` is held for as long as a process exports to NAME, so that two processes on
//! one state directory never both send (and both move the cursor).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use airlock_audit::Position;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::ExportError;

/// The directory of the cursors, in the state directory.
pub const EXPORT_DIR: &str = "export";

/// One destination's cursor, held by this process.
pub struct Cursor {
    path: PathBuf,
    _held: Flock<File>,
}

/// What a claimed cursor said.
pub struct Claimed {
    pub cursor: Cursor,
    /// The last record acknowledged; None: nothing yet, send from the log's first record.
    pub position: Option<Position>,
    /// Said when the cursor file could not be read: everything is sent again (duplicates, not
    /// gaps).
    pub note: Option<String>,
}

impl Cursor {
    /// Take the cursor of `destination` in `state_dir`: refused while another process holds it.
    pub fn claim(state_dir: &Path, destination: &str) -> Result<Claimed, ExportError> {
        let dir = state_dir.join(EXPORT_DIR);
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source: io::Error| ExportError::Cursor { path, source }
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(failed(&dir))?;
        let lock_path = dir.join(format!("{destination}.lock"));
        // No link is followed here (nor for the cursor): a name planted in a directory of the
        // state would otherwise have this process, perhaps root, write where it points.
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(failed(&lock_path))?;
        let held = match Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
            Ok(held) => held,
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(ExportError::Busy {
                    destination: destination.to_string(),
                    lock: lock_path,
                })
            }
            Err((_, errno)) => return Err(failed(&lock_path)(errno.into())),
        };
        let path = dir.join(format!("{destination}.cursor"));
        let (position, note) = match read_no_follow(&path) {
            Ok(bytes) => match serde_json::from_slice::<Position>(&bytes) {
                Ok(position) => (Some(position), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "{} does not read ({e}): sending the whole log again",
                        path.display()
                    )),
                ),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
            Err(source) => return Err(ExportError::Cursor { path, source }),
        };
        Ok(Claimed {
            cursor: Cursor { path, _held: held },
            position,
            note,
        })
    }

    /// Whether `destination` has a cursor here, readable or not: it was exported to.
    pub fn exists(state_dir: &Path, destination: &str) -> bool {
        state_dir
            .join(EXPORT_DIR)
            .join(format!("{destination}.cursor"))
            .symlink_metadata()
            .is_ok()
    }

    /// What the cursor of `destination` says, without claiming it (another process may be
    /// exporting); None when there is none or it does not read.
    pub fn read(state_dir: &Path, destination: &str) -> Option<Position> {
        let path = state_dir
            .join(EXPORT_DIR)
            .join(format!("{destination}.cursor"));
        serde_json::from_slice(&fs::read(path).ok()?).ok()
    }

    /// Record that the destination acknowledged every record up to `position`: written beside
    /// the cursor and renamed over it, so a crash leaves the old cursor or the new one. Not
    /// fsync'd: a cursor that lags after a power cut only sends records again.
    pub fn save(&self, position: &Position) -> io::Result<()> {
        let mut temp = self.path.clone().into_os_string();
        temp.push(".tmp");
        let temp = PathBuf::from(temp);
        // A temporary file left by a crash is this process's own to replace, never a link's
        // target to write through.
        match fs::remove_file(&temp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        let mut text = serde_json::to_vec(position).map_err(io::Error::other)?;
        text.push(b'\n');
        file.write_all(&text)?;
        fs::rename(&temp, &self.path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A cursor file's bytes, refusing a link in its place (ELOOP).
fn read_no_follow(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_saved_read_back_and_held_by_one_process_at_a_time() {
        let state = tempfile::tempdir().unwrap();
        let claimed = Cursor::claim(state.path(), "otlp").unwrap();
        assert_eq!(claimed.position, None);
        let position = Position {
            seq: 7,
            hash: "ab".repeat(32),
            offset: 1234,
        };
        claimed.cursor.save(&position).unwrap();
        let busy = Cursor::claim(state.path(), "otlp")
            .err()
            .unwrap()
            .to_string();
        assert!(
            busy.contains("another airlock process exports to otlp"),
            "{busy}"
        );
        // Another destination has a cursor of its own.
        assert_eq!(
            Cursor::claim(state.path(), "stdout").unwrap().position,
            None
        );
        drop(claimed);
        let again = Cursor::claim(state.path(), "otlp").unwrap();
        assert_eq!(Cursor::read(state.path(), "otlp"), Some(position.clone()));
        assert_eq!(Cursor::read(state.path(), "stdout"), None);
        assert_eq!(again.position, Some(position));
        assert!(again.note.is_none());
    }

    #[test]
    fn no_link_planted_in_the_export_directory_is_written_through() {
        // Found by review: a link at NAME.cursor.tmp had root overwrite the file it named.
        let state = tempfile::tempdir().unwrap();
        let victim = state.path().join("victim");
        fs::write(&victim, b"keep me").unwrap();
        let dir = state.path().join(EXPORT_DIR);
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("otlp.cursor.tmp")).unwrap();
        let claimed = Cursor::claim(state.path(), "otlp").unwrap();
        let position = Position {
            seq: 1,
            hash: "ab".repeat(32),
            offset: 0,
        };
        claimed.cursor.save(&position).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        drop(claimed);
        assert_eq!(
            Cursor::claim(state.path(), "otlp").unwrap().position,
            Some(position)
        );
        // A link as the lock or as the cursor itself is refused, not followed.
        std::os::unix::fs::symlink(&victim, dir.join("stdout.lock")).unwrap();
        assert!(Cursor::claim(state.path(), "stdout").is_err());
        fs::remove_file(dir.join("otlp.cursor")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("otlp.cursor")).unwrap();
        assert!(Cursor::claim(state.path(), "otlp").is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
    }

    #[test]
    fn an_unreadable_cursor_sends_everything_again_and_says_so() {
        let state = tempfile::tempdir().unwrap();
        fs::create_dir_all(state.path().join(EXPORT_DIR)).unwrap();
        fs::write(state.path().join("export/otlp.cursor"), b"{\"seq\":").unwrap();
        let claimed = Cursor::claim(state.path(), "otlp").unwrap();
        assert_eq!(claimed.position, None);
        assert!(claimed
            .note
            .unwrap()
            .contains("sending the whole log again"));
    }
}
