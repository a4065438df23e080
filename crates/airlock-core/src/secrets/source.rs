//! Reading a secret's value from where the profile says, on the host, as airlock: its own
//! environment, a file only its user (or root) can have written, or a program's output.
//! Every failure says why and what to do, and never holds the value.

use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_policy::SecretSource;
use zeroize::Zeroizing;

/// The most a file or a command's output may hold: a credential, not a document.
pub(crate) const MAX_VALUE_BYTES: usize = 64 * 1024;
/// How long a command may take to print the value.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// The value `source` holds, or why there is none (the value never in it).
pub(crate) fn read(source: &SecretSource) -> Result<Zeroizing<String>, String> {
    let text = match source {
        SecretSource::Env(name) => from_env(name)?,
        SecretSource::File(path) => from_file(path)?,
        SecretSource::Command(argv) => from_command(argv)?,
    };
    checked(text)
}

fn from_env(name: &str) -> Result<Zeroizing<String>, String> {
    let value = std::env::var_os(name).ok_or_else(|| {
        format!("the variable {name} is not set in airlock's environment — export it in the environment airlock starts in (the caller's request cannot supply it)")
    })?;
    into_text(Zeroizing::new(value.into_vec()))
}

fn from_file(path: &Path) -> Result<Zeroizing<String>, String> {
    let file = std::fs::File::open(path).map_err(|e| {
        format!(
            "cannot read it: {e} — create it, readable by uid {}, or fix the path",
            euid()
        )
    })?;
    // Judged on the file opened, not the name, so that a swap between the two is no way in.
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file — name the file that holds the value".into());
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "it is writable by its group or by others (mode {:o}), so someone else could choose the value — chmod go-w it",
            meta.mode() & 0o7777
        ));
    }
    if meta.uid() != euid() && meta.uid() != 0 {
        return Err(format!(
            "it belongs to uid {}, not to uid {} or root — chown it, or keep the secret in a file of your own",
            meta.uid(),
            euid()
        ));
    }
    let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_VALUE_BYTES + 1));
    file.take(MAX_VALUE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "it holds more than {MAX_VALUE_BYTES} bytes — a secret file holds the value only"
        ));
    }
    into_text(bytes)
}

fn from_command(argv: &[String]) -> Result<Zeroizing<String>, String> {
    let (program, args) = argv
        .split_first()
        .ok_or("the command is empty — name a program and its arguments")?;
    // No shell; stdin closed so that it cannot wait for a person. Its stderr goes nowhere: the
    // caller of a run may be the agent itself (a hook, the API), and a secret store's messages
    // are not for it; a person runs the command to see why it failed.
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e} — install it, or fix the command"))?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let output = child
        .stdout
        .take()
        .ok_or_else(|| "its output could not be read".to_string())
        .and_then(|stdout| read_until(stdout, deadline));
    let bytes = match output {
        Ok(bytes) => bytes,
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(why);
        }
    };
    let status = wait_until(&mut child, deadline)?;
    if !status.success() {
        return Err(format!("it failed ({status}) — run it yourself to see why"));
    }
    into_text(bytes)
}

/// A command's output up to its end, refused past [`MAX_VALUE_BYTES`] or `deadline`. Without
/// threads: the supervisor must stay single-threaded for the jail's fork.
fn read_until(
    mut stdout: std::process::ChildStdout,
    deadline: Instant,
) -> Result<Zeroizing<Vec<u8>>, String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut bytes = Zeroizing::new(vec![0u8; MAX_VALUE_BYTES + 1]);
    let mut filled = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, timeout).map_err(|e| format!("cannot wait for it: {e}"))?;
        if ready == 0 {
            return Err(timed_out());
        }
        let n = stdout
            .read(&mut bytes[filled..])
            .map_err(|e| format!("cannot read its output: {e}"))?;
        if n == 0 {
            bytes.truncate(filled);
            return Ok(bytes);
        }
        filled += n;
        if filled > MAX_VALUE_BYTES {
            return Err(format!("it printed more than {MAX_VALUE_BYTES} bytes — a secret command prints the value only"));
        }
    }
}

fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
) -> Result<std::process::ExitStatus, String> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(timed_out());
            }
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}

fn timed_out() -> String {
    format!(
        "it did not finish within {} s (waiting for a passphrase or a network?) — make it print the value without asking",
        COMMAND_TIMEOUT.as_secs()
    )
}

/// UTF-8 text, the bytes zeroed whatever happens.
fn into_text(mut bytes: Zeroizing<Vec<u8>>) -> Result<Zeroizing<String>, String> {
    match String::from_utf8(std::mem::take(&mut *bytes)) {
        Ok(text) => Ok(Zeroizing::new(text)),
        Err(e) => {
            drop(Zeroizing::new(e.into_bytes()));
            Err("it is not UTF-8 text — a secret is one line of text".into())
        }
    }
}

/// One trailing newline dropped; refused empty, or with a control character that would let it
/// end a header line the gate writes it into.
fn checked(mut text: Zeroizing<String>) -> Result<Zeroizing<String>, String> {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err("it is empty — put the value there; airlock never uses an empty secret".into());
    }
    if text.chars().any(char::is_control) {
        return Err(
            "it holds a control character (more than one line?) — a secret is one line of text"
                .into(),
        );
    }
    Ok(text)
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}
