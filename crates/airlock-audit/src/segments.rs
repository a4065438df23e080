//! The log on disk: one open segment and the sealed ones before it.
//!
//! ```text
//! STATE/audit.log                          the open segment: appends go here
//! STATE/audit/00000000000000000001.log     sealed segments, named by their first record's seq
//! STATE/audit/00000000000000000001.index   (20 digits: names sort as seqs do), read-only,
//! STATE/audit/00000000000000250001.log     each with its index (see `index`)
//! …
//! ```
//!
//! The open segment stays where the log always was, so a log from before segments is simply an
//! open segment that has not rolled yet. It **rolls** when an append finds it at least
//! [`Layout::segment_size`] bytes long, or (with [`Layout::daily`]) its last record written on
//! an earlier UTC day than now. The appender decides that holding the log's lock, so no two
//! writers roll one segment and no record is split: the segment is sealed whole (its index
//! written, the file made read-only and renamed into `STATE/audit/`), and the record goes to a
//! new open segment whose first `prev` is the sealed one's last hash. The chain is one chain.
//!
//! Sealing order, so that a crash at any step leaves a log that reads and verifies and can be
//! written again: the index is written first (a crash before the rename leaves an index the next
//! roll writes again), then the segment renamed with `RENAME_NOREPLACE` (it is never put over
//! another), then made read-only, then the directories synced.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::index::{index_of, SegmentIndex, INDEX_VERSION};
use crate::AuditError;

/// The directory of the sealed segments, in the state directory.
pub const SEGMENT_DIR: &str = "audit";

/// Sealed segments and their indexes are read-only: no process of airlock writes them again.
const SEALED_MODE: u32 = 0o400;

/// When the open segment rolls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// A segment this long (or longer) is sealed before the next record is written: a segment
    /// holds at most this much and one record.
    pub segment_size: u64,
    /// Also seal a segment whose last record was written on an earlier UTC day: one segment per
    /// day at most, so that retention by days removes whole days.
    pub daily: bool,
}

/// 64 MiB: a quarter of a million typical records, an index of a few KiB, and sealing (reading
/// it once to index it) takes a fraction of a second.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            segment_size: DEFAULT_SEGMENT_SIZE,
            daily: true,
        }
    }
}

/// The smallest `AIRLOCK_AUDIT_SEGMENT_SIZE` taken: a few records a segment. Below it a segment
/// would be sealed (indexed, renamed, synced) for nearly every record: a file and an index per
/// record, which fills a file system's inodes long before its space.
pub const MIN_SEGMENT_SIZE: u64 = 1 << 10;

/// `AIRLOCK_AUDIT_SEGMENT_SIZE` set to what is not a size airlock takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSegmentSize {
    pub value: String,
    pub why: &'static str,
}

impl Layout {
    /// The default, or what `AIRLOCK_AUDIT_SEGMENT_SIZE` (bytes, or with K, M or G: binary
    /// units, at least [`MIN_SEGMENT_SIZE`]) and `AIRLOCK_AUDIT_SEGMENT_DAILY=0` say, as
    /// `AIRLOCK_AUDIT_FSYNC` is read.
    ///
    /// A size that does not read, or is below the floor, is an error (each append is refused,
    /// saying so), not a default taken quietly: someone set it on purpose, and a security
    /// tool that does something other than it was told, without a word, is the surprise its
    /// user least expects. Nothing half happens: the append that refuses comes before its
    /// action, and reading, verifying and exporting the log go on.
    pub fn from_env() -> Result<Layout, BadSegmentSize> {
        Layout::from_os_values(
            std::env::var_os("AIRLOCK_AUDIT_SEGMENT_SIZE").as_deref(),
            std::env::var("AIRLOCK_AUDIT_SEGMENT_DAILY").ok().as_deref(),
        )
    }

    /// [`Layout::from_values`], the size as the environment holds it: one that is not UTF-8 is
    /// refused like any size that does not read (found by review: `var` turned it into "unset",
    /// and the default was taken without a word).
    pub fn from_os_values(
        size: Option<&std::ffi::OsStr>,
        daily: Option<&str>,
    ) -> Result<Layout, BadSegmentSize> {
        let size = match size {
            Some(value) => Some(value.to_str().ok_or_else(|| BadSegmentSize {
                value: value.to_string_lossy().into_owned(),
                why: "not text (not UTF-8)",
            })?),
            None => None,
        };
        Layout::from_values(size, daily)
    }

    /// [`Layout::from_env`] from the variables' values.
    pub fn from_values(size: Option<&str>, daily: Option<&str>) -> Result<Layout, BadSegmentSize> {
        let mut layout = Layout::default();
        if let Some(value) = size.filter(|v| !v.trim().is_empty()) {
            let bad = |why| BadSegmentSize {
                value: value.to_string(),
                why,
            };
            let size = parse_size(value).ok_or_else(|| bad("not a size"))?;
            if size < MIN_SEGMENT_SIZE {
                return Err(bad("smaller than 1K, the least a segment holds"));
            }
            layout.segment_size = size;
        }
        if let Some("0" | "false" | "off") = daily {
            layout.daily = false;
        }
        Ok(layout)
    }

    /// Whether an open segment of `size` bytes whose last record has `last_time` rolls before a
    /// record written at `now`.
    pub(crate) fn rolls(&self, size: u64, last_time: Option<&str>, now: SystemTime) -> bool {
        if size == 0 {
            return false;
        }
        if size >= self.segment_size {
            return true;
        }
        let today = crate::format_time(now);
        self.daily && last_time.is_some_and(|last| day(last) < day(&today))
    }
}

/// `2026-11-29` of `2026-11-29T20:00:00.000Z`.
fn day(time: &str) -> &str {
    time.get(..10).unwrap_or(time)
}

/// `1024`, `64K`, `64M`, `1G` (binary units; `KiB`, `MiB`, `GiB` too).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(unit)
}

/// A sealed segment's file name: its first seq in 20 digits.
pub fn segment_file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.log")
}

/// A sealed segment, as found in `STATE/audit/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The first record's seq, as the file's name says.
    pub first_seq: u64,
    pub path: PathBuf,
}

impl Sealed {
    pub fn index_path(&self) -> PathBuf {
        self.path.with_extension("index")
    }

    /// The segment's index; None when it is missing or does not read (the segment is then read
    /// whole, and `verify` says what is wrong with it).
    pub fn index(&self) -> Option<SegmentIndex> {
        let bytes = fs::read(self.index_path()).ok()?;
        serde_json::from_slice::<SegmentIndex>(&bytes)
            .ok()
            .filter(|index| index.version == INDEX_VERSION)
    }
}

/// The sealed segments of `state_dir`, oldest first. Other files there (indexes, a temporary
/// file a crash left) are not segments.
pub fn sealed_segments(state_dir: &Path) -> Result<Vec<Sealed>, AuditError> {
    let dir = state_dir.join(SEGMENT_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(AuditError::Read { path: dir, source }),
    };
    let mut sealed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| AuditError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name();
        let Some(first_seq) = name.to_str().and_then(first_seq_of_name) else {
            continue;
        };
        sealed.push(Sealed {
            first_seq,
            path: entry.path(),
        });
    }
    sealed.sort_by_key(|s| s.first_seq);
    Ok(sealed)
}

fn first_seq_of_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The seq of the first record of `file`, if its first line is a complete record.
pub(crate) fn first_seq_of(file: &File) -> io::Result<Option<u64>> {
    let Some(line) = read_line_at(file, 0)? else {
        return Ok(None);
    };
    Ok(serde_json::from_slice::<serde_json::Value>(&line)
        .ok()
        .and_then(|record| record.get("seq")?.as_u64()))
}

/// The complete line starting at `offset`, without its newline; None at or past the end, or when
/// the line there has no newline yet.
pub(crate) fn read_line_at(file: &File, offset: u64) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = file.read_at(&mut chunk, offset + line.len() as u64)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(end) = chunk[..n].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&chunk[..end]);
            return Ok(Some(line));
        }
        line.extend_from_slice(&chunk[..n]);
    }
}

/// Whether `file` is the file at `path` now (not one moved away from it, or rolled).
pub(crate) fn is_at(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    match fs::metadata(path) {
        Ok(now) => Ok((now.dev(), now.ino()) == (open.dev(), open.ino())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `file`, an open segment moved away from the path, is where a roll seals it: the
/// sealed segment named by its first record. False for one moved anywhere else (or removed
/// by retention since).
pub(crate) fn was_sealed(state_dir: &Path, file: &File) -> io::Result<bool> {
    let Some(first_seq) = first_seq_of(file)? else {
        return Ok(false);
    };
    let sealed = state_dir
        .join(SEGMENT_DIR)
        .join(segment_file_name(first_seq));
    is_at(file, &sealed)
}

/// Seal the open segment `file` (at `open_path`, locked by the caller, with no torn line):
/// write its index, make it read-only and move it into `STATE/audit/` under its first seq.
/// Returns the index. With `durable`, the segment, its index and both directories are synced.
pub(crate) fn seal(
    state_dir: &Path,
    open_path: &Path,
    file: &mut File,
    durable: bool,
) -> Result<SegmentIndex, AuditError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| AuditError::Append { path, source }
    };
    file.seek(SeekFrom::Start(0)).map_err(fail(open_path))?;
    let index = index_of(BufReader::with_capacity(1 << 20, Read::by_ref(file)))
        .map_err(fail(open_path))?
        .ok_or_else(|| fail(open_path)(io::Error::other("it holds no record to seal")))?;
    let dir = state_dir.join(SEGMENT_DIR);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(fail(&dir))?;
    let sealed = Sealed {
        first_seq: index.first_seq,
        path: dir.join(segment_file_name(index.first_seq)),
    };
    if durable {
        file.sync_data().map_err(fail(open_path))?;
    }
    // Found by review: a segment of that name already there (an old copy of the log put back)
    // had its index replaced before the rename below refused; refused here, before either.
    if fs::symlink_metadata(&sealed.path).is_ok() {
        return Err(fail(open_path)(io::Error::other(format!(
            "{} exists already: two segments start at record {}; run 'airlock log verify'",
            sealed.path.display(),
            index.first_seq
        ))));
    }
    write_index(&sealed.index_path(), &index, durable)?;
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        open_path,
        nix::fcntl::AT_FDCWD,
        &sealed.path,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(|errno| {
        let why = if errno == nix::errno::Errno::EEXIST {
            io::Error::other(format!(
                "{} exists already: two segments start at record {}; run 'airlock log verify'",
                sealed.path.display(),
                index.first_seq
            ))
        } else {
            errno.into()
        };
        fail(open_path)(why)
    })?;
    // Read-only once it is sealed, through the file this process holds: made so before the
    // rename, a crash between the two left the open segment unwritable for its own user.
    file.set_permissions(fs::Permissions::from_mode(SEALED_MODE))
        .map_err(fail(&sealed.path))?;
    if durable {
        for synced in [&dir, state_dir] {
            File::open(synced)
                .and_then(|d| d.sync_all())
                .map_err(fail(synced))?;
        }
    }
    Ok(index)
}

/// Write `index` beside its segment: through a temporary file renamed over it, so that a reader
/// never sees half an index.
fn write_index(path: &Path, index: &SegmentIndex, durable: bool) -> Result<(), AuditError> {
    let fail = |source: io::Error| AuditError::Append {
        path: path.to_path_buf(),
        source,
    };
    let mut text = serde_json::to_vec(index).map_err(|e| fail(io::Error::other(e)))?;
    text.push(b'\n');
    let mut temp = path.as_os_str().to_os_string();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let _ = fs::remove_file(&temp);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(SEALED_MODE)
        .open(&temp)
        .map_err(fail)?;
    out.write_all(&text).map_err(fail)?;
    if durable {
        out.sync_data().map_err(fail)?;
    }
    fs::rename(&temp, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by review: a size that did not read was ignored without a word, and there was no
    /// floor (`1` sealed a segment for every record).
    #[test]
    fn a_segment_size_that_does_not_read_or_is_too_small_is_refused() {
        let size = |value| Layout::from_values(Some(value), None);
        for (value, why) in [
            ("lots", "not a size"),
            ("64X", "not a size"),
            ("1.5G", "not a size"),
            ("1", "smaller than 1K"),
            ("1023", "smaller than 1K"),
        ] {
            let bad = size(value).unwrap_err();
            assert_eq!(bad.value, value);
            assert!(bad.why.starts_with(why), "{value}: {bad:?}");
        }
        // What the tests and scripts use, and what the benchmark does to never roll.
        assert_eq!(size("1K").unwrap().segment_size, 1024);
        assert_eq!(size("2K").unwrap().segment_size, 2048);
        assert_eq!(size("1048576G").unwrap().segment_size, 1 << 50);
        assert_eq!(size("").unwrap(), Layout::default());
        assert_eq!(Layout::from_values(None, None).unwrap(), Layout::default());
        assert!(!Layout::from_values(None, Some("0")).unwrap().daily);
    }

    #[test]
    fn sizes_read_with_binary_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("64 MiB"), Some(64 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("1.5G"), None);
        assert_eq!(parse_size("lots"), None);
    }

    #[test]
    fn names_sort_as_seqs_and_others_are_not_segments() {
        assert_eq!(segment_file_name(42), "00000000000000000042.log");
        assert_eq!(first_seq_of_name("00000000000000000042.log"), Some(42));
        for other in [
            "00000000000000000042.index",
            "42.log",
            "00000000000000000042.log.tmp",
            "0000000000000000004x.log",
        ] {
            assert_eq!(first_seq_of_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_segment_rolls_by_size_or_by_day() {
        let at = |text: &str| humantime::parse_rfc3339(text).unwrap();
        let layout = Layout {
            segment_size: 1000,
            daily: true,
        };
        let today = at("2026-03-02T00:00:01Z");
        assert!(
            !layout.rolls(0, None, today),
            "an empty segment never rolls"
        );
        assert!(!layout.rolls(999, Some("2026-03-02T00:00:00.000Z"), today));
        assert!(layout.rolls(1000, Some("2026-03-02T00:00:00.000Z"), today));
        assert!(layout.rolls(10, Some("2026-03-01T23:59:59.999Z"), today));
        let by_size_only = Layout {
            daily: false,
            ..layout
        };
        assert!(!by_size_only.rolls(10, Some("2026-03-01T23:59:59.999Z"), today));
    }
}
