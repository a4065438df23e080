//! Text that came from the sandbox's side (a command line, a file name, a host name), made safe
//! to print for a person: it can neither start a line of its own (a forged log record) nor send
//! the terminal escape sequences. JSON output needs none of this; it is escaped by its encoding.

use std::fmt::Write as _;

/// `eprintln!` that cannot panic: a message to a stderr that is gone (closed, full) is lost, and
/// the command goes on to its exit status, which is what a caller in a pipe reads.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use note;

/// `println!` (and `print!`, as `out!(text: ...)`) that cannot panic: a reader that went away
/// (`| head -1`) ends the output, not the command with a panic; any other failure to write (a
/// full disk) is said and ends the command with airlock's error status, never a silent success.
macro_rules! out {
    (text: $text:expr) => {{
        use std::io::Write as _;
        $crate::shown::delivered(std::io::stdout().write_all(AsRef::<[u8]>::as_ref(&$text)))
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        $crate::shown::delivered(writeln!(std::io::stdout(), $($arg)*))
    }};
}
pub(crate) use out;

/// What became of output to stdout (see [`out!`]).
pub fn delivered(written: std::io::Result<()>) {
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            note!("airlock: error: cannot write to stdout: {e}");
            std::process::exit(i32::from(crate::EXIT_AIRLOCK_ERROR));
        }
    }
}

/// `text` with every control character (C0, DEL, C1) shown as an escape: `\n`, `\t`, `\r`,
/// `\e`, else `\xHH` (`\u{HHHH}` above U+00FF). Everything else is left as it is.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        push_escaped(&mut out, ch);
    }
    out
}

fn push_escaped(out: &mut String, ch: char) {
    match ch {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\x1b' => out.push_str("\\e"),
        ch if ch.is_control() && (ch as u32) <= 0xff => {
            let _ = write!(out, "\\x{:02x}", ch as u32);
        }
        ch if ch.is_control() => {
            let _ = write!(out, "\\u{{{:04x}}}", ch as u32);
        }
        ch => out.push(ch),
    }
}

/// A command line as a shell reads it back: plain words as they are, others in single quotes,
/// and those with control characters in `$'…'` with escapes.
pub fn command_line<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|arg| quoted(arg.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Rows under a header, one line each, every column as wide as its widest cell (the last one,
/// often a path, is not padded): `airlock sessions`, `airlock token list`.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(String::from);
    for cells in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `n` and the noun that counts it, in the number it takes (core's, which its notes use).
pub use airlock_core::counted;

fn quoted(arg: &str) -> String {
    let plain = |ch: char| ch.is_alphanumeric() || "_@%+=:,./-".contains(ch);
    if !arg.is_empty() && arg.chars().all(plain) {
        return arg.to_string();
    }
    if !arg.chars().any(char::is_control) {
        return format!("'{}'", arg.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for ch in arg.chars() {
        if ch == '\'' || ch == '\\' {
            out.push('\\');
            out.push(ch);
        } else {
            push_escaped(&mut out, ch);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_escapes() {
        assert_eq!(printable("plain text é"), "plain text é");
        assert_eq!(printable("a\nb\x1b[2J\\n\u{9b}"), "a\\nb\\e[2J\\n\\x9b");
        assert!(!printable("x\r\n\x07\u{85}").chars().any(char::is_control));
    }

    #[test]
    fn a_table_lines_up_under_its_header() {
        let rows = [
            ["t1".to_string(), "agent".to_string(), "/srv/a".to_string()],
            [
                "token-2".to_string(),
                "operator".to_string(),
                "-".to_string(),
            ],
        ];
        assert_eq!(
            table(["ID", "ROLE", "WORKSPACE"], &rows),
            "ID       ROLE      WORKSPACE\n\
             t1       agent     /srv/a\n\
             token-2  operator  -\n"
        );
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        assert_eq!(counted(1, "path", "paths"), "1 path");
        assert_eq!(counted(0, "path", "paths"), "0 paths");
        assert_eq!(counted(2, "process", "processes"), "2 processes");
    }

    #[test]
    fn command_lines_read_back_as_typed() {
        assert_eq!(command_line(&["ls", "-la", "/tmp"]), "ls -la /tmp");
        assert_eq!(
            command_line(&["sh", "-c", "echo 'hi' there"]),
            r"sh -c 'echo '\''hi'\'' there'"
        );
        assert_eq!(command_line(&["", "a b"]), "'' 'a b'");
        assert_eq!(command_line(&["x\ny"]), r"$'x\ny'");
        assert_eq!(command_line(&["it's\x1b\\"]), r"$'it\'s\e\\'");
    }
}
