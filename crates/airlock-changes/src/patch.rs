//! A change set as git writes it: `git diff --binary` format (so `git apply` takes it), and the
//! `--stat` and `--name-status` summaries.
//!
//! Only files and symlinks are carried, as git does: directories show through the files in them,
//! and fifos, sockets and device nodes cannot be expressed (the caller reports them).

use std::io::{self, Write};
use std::path::Path;

use sha1::{Digest, Sha1};

use crate::node::{content, Kind, Node};
use crate::scan::Change;

/// One side of a patchable change: the entry and its bytes (content, or symlink target).
type Side = Option<(Node, Vec<u8>)>;

/// The bytes of both sides of one patchable change.
struct Sides {
    old: Side,
    new: Side,
}

/// Where the two sides of a change set live.
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    /// The host workspace.
    pub host: &'a Path,
    /// The session's upper layer.
    pub layer: &'a Path,
}

fn load(roots: Roots, change: &Change) -> io::Result<Sides> {
    let side = |root: &Path, node: &Option<Node>| -> io::Result<Side> {
        match node {
            Some(node) if node.has_content() => Ok(Some((
                node.clone(),
                content(&root.join(&change.path), node)?,
            ))),
            _ => Ok(None),
        }
    };
    Ok(Sides {
        old: side(roots.host, &change.old)?,
        new: side(roots.layer, &change.new)?,
    })
}

/// git's blob id: SHA-1 of `blob <size>\0<content>`.
pub fn git_blob_id(data: &[u8]) -> String {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", data.len()).as_bytes());
    hasher.update(data);
    hex::encode(hasher.finalize())
}

const NULL_ID: &str = "0000000000000000000000000000000000000000";

/// git's test for binary content: a NUL byte in the first 8000 bytes.
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

/// A path as git writes it in headers: C-quoted when it holds bytes git would not print plainly.
pub fn quote_path(prefix: &str, path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    let needs_quotes = bytes
        .iter()
        .any(|&b| b < 0x20 || b == 0x7f || b >= 0x80 || b == b'"' || b == b'\\');
    if !needs_quotes {
        return format!("{prefix}{}", String::from_utf8_lossy(bytes));
    }
    let mut out = String::from("\"");
    out.push_str(prefix);
    for &b in bytes {
        match b {
            b'\x07' => out.push_str("\\a"),
            b'\x08' => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\x0b' => out.push_str("\\v"),
            b'\x0c' => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(b as char),
        }
    }
    out.push('"');
    out
}

/// Which changes a patch carries as one or two file-level diffs (a type change is a deletion
/// and an addition, as in git).
fn file_diffs(sides: Sides) -> Vec<(Side, Side)> {
    match (sides.old, sides.new) {
        (Some(old), Some(new)) if old.0.kind != new.0.kind => {
            vec![(Some(old), None), (None, Some(new))]
        }
        (old, new) => vec![(old, new)],
    }
}

/// The most content of one file a patch carries (the bound past which a file is flagged
/// `large`). A file's size is what it says, not what it takes on disk: a sparse file of 10 GiB
/// takes none, and would take 10 GiB of the reviewer's memory.
pub const LARGEST_FILE_CARRIED: u64 = 100 * 1024 * 1024;
/// The most content one patch carries in all, both sides of every file counted.
pub const MOST_CONTENT_CARRIED: u64 = 1024 * 1024 * 1024;

/// A change a patch leaves out, or carries only in part, and why.
#[derive(Debug, Clone)]
pub struct LeftOut {
    pub change: Change,
    pub why: WhyLeftOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhyLeftOut {
    /// A fifo, socket or device node, which git cannot express (a file on the other side of
    /// the change is carried).
    Special,
    /// A file larger than [`LARGEST_FILE_CARRIED`].
    TooLarge,
    /// The patch already carries [`MOST_CONTENT_CARRIED`].
    PatchFull,
}

/// The bytes of the regular files on either side of `change`: the largest, and both together.
pub fn file_sizes(change: &Change) -> (u64, u64) {
    let sizes = [&change.old, &change.new].map(|n| {
        n.as_ref()
            .filter(|n| n.kind == Kind::File)
            .map_or(0, |n| n.size)
    });
    (sizes[0].max(sizes[1]), sizes[0].saturating_add(sizes[1]))
}

/// Write `changes` as a git patch; returns the changes it left out or could only partly express.
pub fn write_patch<W: Write>(
    out: &mut W,
    roots: Roots,
    changes: &[Change],
) -> io::Result<Vec<LeftOut>> {
    let bounds = Bounds {
        largest_file: LARGEST_FILE_CARRIED,
        most_content: MOST_CONTENT_CARRIED,
    };
    write_patch_within(out, roots, changes, bounds)
}

/// How much content a patch carries.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    largest_file: u64,
    most_content: u64,
}

fn write_patch_within<W: Write>(
    out: &mut W,
    roots: Roots,
    changes: &[Change],
    bounds: Bounds,
) -> io::Result<Vec<LeftOut>> {
    let (mut left_out, mut carried) = (Vec::new(), 0u64);
    for change in changes {
        let leave_out = |why| LeftOut {
            change: change.clone(),
            why,
        };
        let (largest, both) = file_sizes(change);
        if largest > bounds.largest_file {
            left_out.push(leave_out(WhyLeftOut::TooLarge));
            continue;
        }
        if carried.saturating_add(both) > bounds.most_content {
            left_out.push(leave_out(WhyLeftOut::PatchFull));
            continue;
        }
        carried += both;
        let kinds = [&change.old, &change.new].map(|n| n.as_ref().map(|n| n.kind));
        let special = |k: Option<Kind>| {
            matches!(
                k,
                Some(Kind::Fifo | Kind::Socket | Kind::CharDevice | Kind::BlockDevice)
            )
        };
        if kinds.iter().any(|k| special(*k)) {
            left_out.push(leave_out(WhyLeftOut::Special));
        }
        let sides = load(roots, change)?;
        for (old, new) in file_diffs(sides) {
            if old.is_none() && new.is_none() {
                continue;
            }
            write_file_diff(out, &change.path, old, new)?;
        }
    }
    Ok(left_out)
}

fn write_file_diff<W: Write>(out: &mut W, path: &Path, old: Side, new: Side) -> io::Result<()> {
    let old_mode = old.as_ref().and_then(|(n, _)| n.git_mode());
    let new_mode = new.as_ref().and_then(|(n, _)| n.git_mode());
    let old_data = old.as_ref().map(|(_, d)| d.as_slice());
    let new_data = new.as_ref().map(|(_, d)| d.as_slice());
    if old_mode == new_mode && old_data == new_data {
        // Nothing git records changed (say, 0644 became 0600): no patch to write.
        return Ok(());
    }
    let a = quote_path("a/", path);
    let b = quote_path("b/", path);
    writeln!(out, "diff --git {a} {b}")?;
    match (old_mode, new_mode) {
        (None, Some(mode)) => writeln!(out, "new file mode {mode:o}")?,
        (Some(mode), None) => writeln!(out, "deleted file mode {mode:o}")?,
        (Some(o), Some(n)) if o != n => {
            writeln!(out, "old mode {o:o}")?;
            writeln!(out, "new mode {n:o}")?;
        }
        _ => {}
    }
    if old_data == new_data {
        // Only the mode changed.
        return Ok(());
    }
    let old_id = old_data.map_or(NULL_ID.to_string(), git_blob_id);
    let new_id = new_data.map_or(NULL_ID.to_string(), git_blob_id);
    // Full ids: git applies binary patches only with them, and takes them for text as well.
    match (old_mode, new_mode) {
        (Some(o), Some(n)) if o == n => writeln!(out, "index {old_id}..{new_id} {o:o}")?,
        _ => writeln!(out, "index {old_id}..{new_id}")?,
    }
    let old_bytes = old_data.unwrap_or_default();
    let new_bytes = new_data.unwrap_or_default();
    if old_bytes.is_empty() && new_bytes.is_empty() {
        return Ok(());
    }
    let from = if old.is_some() {
        a.clone()
    } else {
        "/dev/null".into()
    };
    let to = if new.is_some() {
        b.clone()
    } else {
        "/dev/null".into()
    };
    if is_binary(old_bytes) || is_binary(new_bytes) {
        writeln!(out, "GIT binary patch")?;
        write_binary_hunk(out, new_bytes)?;
        write_binary_hunk(out, old_bytes)?;
        return Ok(());
    }
    writeln!(out, "--- {from}")?;
    writeln!(out, "+++ {to}")?;
    write_hunks(out, old_bytes, new_bytes)
}

/// The lines of `text` as git splits them: at LF only. (`similar`'s own line diff also ends a
/// line at a lone CR, and a patch with such a line is one git cannot apply.)
/// How long the search for the smallest diff of one file may take; past it, the diff found so far
/// is finished (still a correct patch, perhaps a longer one). Myers' search takes time that grows
/// with the file's lines times the lines changed: 12 s for 200,000 lines shuffled, hours for ten
/// times that — a file a sandbox rewrote must not keep a diff (an API request's thread) that long.
const DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn git_lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|&b| b == b'\n').collect()
}

fn write_hunks<W: Write>(out: &mut W, old: &[u8], new: &[u8]) -> io::Result<()> {
    let (old, new) = (git_lines(old), git_lines(new));
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(DIFF_TIMEOUT)
        .diff_slices(&old, &new);
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        writeln!(out, "{}", hunk.header())?;
        for change in hunk.iter_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Equal => b' ',
                similar::ChangeTag::Delete => b'-',
                similar::ChangeTag::Insert => b'+',
            };
            let line: &[u8] = change.value();
            out.write_all(&[sign])?;
            out.write_all(line)?;
            if !line.ends_with(b"\n") {
                out.write_all(b"\n\\ No newline at end of file\n")?;
            }
        }
    }
    Ok(())
}

/// git's base85 alphabet.
const BASE85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One `literal` hunk: the zlib-deflated data in lines of at most 52 bytes, base85-encoded.
fn write_binary_hunk<W: Write>(out: &mut W, data: &[u8]) -> io::Result<()> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data)?;
    let deflated = encoder.finish()?;
    writeln!(out, "literal {}", data.len())?;
    for line in deflated.chunks(52) {
        let len = line.len() as u8;
        let marker = if len <= 26 {
            b'A' + len - 1
        } else {
            b'a' + len - 27
        };
        let mut text = vec![marker];
        for group in line.chunks(4) {
            let mut word = [0u8; 4];
            word[..group.len()].copy_from_slice(group);
            let mut acc = u32::from_be_bytes(word);
            let mut chars = [0u8; 5];
            for slot in chars.iter_mut().rev() {
                *slot = BASE85[(acc % 85) as usize];
                acc /= 85;
            }
            text.extend_from_slice(&chars);
        }
        text.push(b'\n');
        out.write_all(&text)?;
    }
    writeln!(out)
}

/// Lines added and removed in one change; None for binary content, and for a file larger than
/// [`LARGEST_FILE_CARRIED`] (not read: its size says enough).
pub fn line_counts(roots: Roots, change: &Change) -> io::Result<Option<(usize, usize)>> {
    if file_sizes(change).0 > LARGEST_FILE_CARRIED {
        return Ok(None);
    }
    let sides = load(roots, change)?;
    let old = sides.old.map(|(_, d)| d).unwrap_or_default();
    let new = sides.new.map(|(_, d)| d).unwrap_or_default();
    if is_binary(&old) || is_binary(&new) {
        return Ok(None);
    }
    let (old, new) = (git_lines(&old), git_lines(&new));
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(DIFF_TIMEOUT)
        .diff_slices(&old, &new);
    let (mut added, mut removed) = (0, 0);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            match change.tag() {
                similar::ChangeTag::Insert => added += 1,
                similar::ChangeTag::Delete => removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
    }
    Ok(Some((added, removed)))
}

/// `git diff --name-status`: one line per path with its status letter.
pub fn write_name_status<W: Write>(out: &mut W, changes: &[Change]) -> io::Result<()> {
    for change in changes {
        if is_dir_only(change) {
            continue;
        }
        writeln!(
            out,
            "{}\t{}",
            change.status.letter(),
            quote_path("", &change.path)
        )?;
    }
    Ok(())
}

/// A change that is only about a directory (git does not show those).
fn is_dir_only(change: &Change) -> bool {
    let dir = |n: &Option<Node>| n.as_ref().is_none_or(|n| n.kind == Kind::Dir);
    dir(&change.old) && dir(&change.new)
}

/// `git diff --stat`: per path, lines changed and a bar; then the totals.
pub fn write_stat<W: Write>(out: &mut W, roots: Roots, changes: &[Change]) -> io::Result<()> {
    let mut rows = Vec::new();
    for change in changes.iter().filter(|c| !is_dir_only(c)) {
        let name = quote_path("", &change.path);
        let counts = line_counts(roots, change)?;
        let sizes = [&change.old, &change.new].map(|n| {
            n.as_ref()
                .filter(|n| n.kind == Kind::File)
                .map_or(0, |n| n.size)
        });
        rows.push((name, counts, sizes));
    }
    if rows.is_empty() {
        return Ok(());
    }
    let name_width = rows
        .iter()
        .map(|(n, _, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let most = rows
        .iter()
        .filter_map(|(_, c, _)| c.map(|(a, r)| a + r))
        .max()
        .unwrap_or(0);
    let count_width = most.to_string().len();
    const BAR: usize = 50;
    let (mut added_total, mut removed_total) = (0, 0);
    for (name, counts, sizes) in &rows {
        match counts {
            Some((added, removed)) => {
                added_total += added;
                removed_total += removed;
                let total = added + removed;
                let scale = |n: usize| {
                    if most <= BAR || n == 0 {
                        n
                    } else {
                        (n * BAR / most).max(1)
                    }
                };
                writeln!(
                    out,
                    " {name:<name_width$} | {total:>count_width$} {}{}",
                    "+".repeat(scale(*added)),
                    "-".repeat(scale(*removed))
                )?;
            }
            None => writeln!(
                out,
                " {name:<name_width$} | Bin {} -> {} bytes",
                sizes[0], sizes[1]
            )?,
        }
    }
    let files = rows.len();
    let mut summary = format!(" {files} file{} changed", if files == 1 { "" } else { "s" });
    if added_total > 0 || removed_total == 0 {
        summary.push_str(&format!(
            ", {added_total} insertion{}(+)",
            if added_total == 1 { "" } else { "s" }
        ));
    }
    if removed_total > 0 {
        summary.push_str(&format!(
            ", {removed_total} deletion{}(-)",
            if removed_total == 1 { "" } else { "s" }
        ));
    }
    writeln!(out, "{summary}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_match_git() {
        // `git hash-object /dev/null` and `printf 'hello\n' | git hash-object --stdin`.
        assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(
            git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        assert_eq!(
            quote_path("a/", Path::new("plain name.txt")),
            "a/plain name.txt"
        );
        assert_eq!(quote_path("a/", Path::new("new\nline")), "\"a/new\\nline\"");
        assert_eq!(quote_path("b/", Path::new("naïve")), "\"b/na\\303\\257ve\"");
        assert_eq!(quote_path("", Path::new("q\"b\\s")), "\"q\\\"b\\\\s\"");
    }

    /// The patch for a file that was `old` and is now `new`, applied by `git apply` to a
    /// directory holding `old`: what the file holds then.
    fn applied(old: &[u8], new: &[u8]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let (host, layer) = (dir.path().join("host"), dir.path().join("layer"));
        for (root, data) in [(&host, old), (&layer, new)] {
            std::fs::create_dir(root).unwrap();
            std::fs::write(root.join("f"), data).unwrap();
        }
        let side = |root: &Path, data: &[u8]| {
            Some((Node::read(&root.join("f")).unwrap().unwrap(), data.to_vec()))
        };
        let mut patch = Vec::new();
        write_file_diff(
            &mut patch,
            Path::new("f"),
            side(&host, old),
            side(&layer, new),
        )
        .unwrap();
        let mut git = std::process::Command::new("git")
            .args(["apply", "-"])
            .current_dir(&host)
            .env("GIT_CEILING_DIRECTORIES", dir.path())
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        git.stdin.take().unwrap().write_all(&patch).unwrap();
        let result = git.wait_with_output().unwrap();
        let shown = String::from_utf8_lossy(&patch);
        let why = String::from_utf8_lossy(&result.stderr);
        assert!(result.status.success(), "git apply refused: {why}\n{shown}");
        std::fs::read(host.join("f")).unwrap()
    }

    #[test]
    fn a_lone_carriage_return_does_not_end_a_line() {
        // Found by fuzz/fuzz_targets/patch_names.rs: lines split at a lone CR as well as at LF
        // made a patch git could not apply ("patch does not apply").
        let (old, new) = (&b"newa.t.txthxtoel\r\t"[..], &b""[..]);
        assert_eq!(applied(old, new), new);
        let (old, new) = (&b"one\rtwo\nthree\n"[..], &b"one\rtwo\nfour\r\n"[..]);
        assert_eq!(applied(old, new), new);
    }

    #[test]
    fn hunks_are_in_order_when_lines_repeat() {
        // Found by fuzz/fuzz_targets/patch_names.rs: similar 2.7's Myers diff gave ops out of
        // order here, and the patch a hunk header git calls corrupt (`@@ -1 +4,2 @@`).
        let old = b"\x0ei\x0e\x0e\x0e\x0e\x0e\x0e\none\n\n";
        let new = b"\notone\n\n\n\n";
        assert_eq!(applied(old, new), new);
    }

    /// A sparse file of any size takes no disk: the patch leaves out a file past the bound by
    /// its size, unread, and stops carrying content once it carries its most.
    #[test]
    fn content_past_the_bounds_is_left_out_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let (host, layer) = (dir.path().join("host"), dir.path().join("layer"));
        std::fs::create_dir(&host).unwrap();
        std::fs::create_dir(&layer).unwrap();
        for (name, text) in [("a", "0123456789\n"), ("b", "bb\n"), ("c", "cc\n")] {
            std::fs::write(layer.join(name), text).unwrap();
        }
        let huge = std::fs::File::create(layer.join("huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        let set = crate::scan(&layer, &host, crate::OverlayXattrs::User).unwrap();
        let roots = Roots {
            host: &host,
            layer: &layer,
        };
        let bounds = Bounds {
            largest_file: 11,
            most_content: 14,
        };
        let mut patch = Vec::new();
        let left = write_patch_within(&mut patch, roots, &set.changes, bounds).unwrap();
        let left: Vec<(String, WhyLeftOut)> = left
            .iter()
            .map(|l| (l.change.path.display().to_string(), l.why))
            .collect();
        assert_eq!(
            left,
            [
                ("c".to_string(), WhyLeftOut::PatchFull),
                ("huge".to_string(), WhyLeftOut::TooLarge)
            ]
        );
        let patch = String::from_utf8(patch).unwrap();
        assert!(
            patch.contains("+++ b/a") && patch.contains("+++ b/b"),
            "{patch}"
        );
        assert!(!patch.contains("b/c") && !patch.contains("huge"), "{patch}");
        // The real bounds: a terabyte is left out unread, and counted as no lines.
        let mut patch = Vec::new();
        let left = write_patch(&mut patch, roots, &set.changes).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].why, WhyLeftOut::TooLarge);
        let huge = set.changes.iter().find(|c| c.path == Path::new("huge"));
        assert_eq!(line_counts(roots, huge.unwrap()).unwrap(), None);
    }

    #[test]
    fn binary_is_a_nul_in_the_first_8000_bytes() {
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary("naïve\n".as_bytes()));
        let mut late = vec![b'a'; 9000];
        late[8500] = 0;
        assert!(!is_binary(&late));
    }
}
