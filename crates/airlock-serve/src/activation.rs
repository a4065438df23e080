//! Socket activation: the listening socket systemd (a `.socket` unit, or
//! `systemd-socket-activate`) bound and passed as file descriptor 3, with `LISTEN_FDS` and
//! `LISTEN_PID` saying so. The descriptor is taken by the `listenfd` crate (which checks that it
//! is a stream socket of the family asked for and marks it close-on-exec, so that no worker or
//! sandbox inherits the server's socket); the protocol's rules are kept here, as `sd_listen_fds`
//! keeps them, since listenfd also takes a socket when `LISTEN_PID` is missing.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// A listening socket systemd passed.
#[derive(Debug)]
pub enum Passed {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

impl Passed {
    /// Where it listens, as `--listen` would name it.
    pub fn address(&self) -> Result<PassedAddress> {
        Ok(match self {
            Passed::Unix(listener) => PassedAddress::Unix(
                listener
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(PathBuf::from)),
            ),
            Passed::Tcp(listener) => PassedAddress::Tcp(
                listener
                    .local_addr()
                    .context("the socket systemd passed (LISTEN_FDS): cannot tell its address")?,
            ),
        })
    }
}

/// The address of a passed socket: a unix socket may have no path (abstract or unnamed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassedAddress {
    Unix(Option<PathBuf>),
    Tcp(SocketAddr),
}

impl std::fmt::Display for PassedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassedAddress::Unix(Some(path)) => write!(f, "unix:{}", path.display()),
            PassedAddress::Unix(None) => write!(f, "unix:(no path)"),
            PassedAddress::Tcp(addr) => write!(f, "{addr}"),
        }
    }
}

/// The variables of the protocol: all of them are unset, whoever they were meant for, so that no
/// worker started later inherits them.
const VARIABLES: [&str; 4] = [
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "LISTEN_FDS_FIRST_FD",
];

/// The socket systemd passed this process, if it passed one. Call it before any thread is
/// started: it changes the environment.
///
/// `LISTEN_PID` must be this process's pid; otherwise the variables were meant for another
/// process (a parent that did not unset them) and are ignored, as `sd_listen_fds` ignores them.
/// More than one socket, or a descriptor that is not a listening stream socket, is refused.
pub fn take_from_systemd() -> Result<Option<Passed>> {
    let count = std::env::var("LISTEN_FDS").ok();
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|pid| pid.parse::<u32>().ok())
        == Some(std::process::id());
    // listenfd reads the variables it needs and unsets two of them; the others go here, and
    // before it reads them: the first descriptor is always 3, as systemd passes it.
    for name in ["LISTEN_FDNAMES", "LISTEN_FDS_FIRST_FD"] {
        std::env::remove_var(name);
    }
    if !ours {
        for name in VARIABLES {
            std::env::remove_var(name);
        }
        return Ok(None);
    }
    let mut fds = listenfd::ListenFd::from_env();
    for name in VARIABLES {
        std::env::remove_var(name);
    }
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        many => bail!(
            "systemd passed {many} sockets (LISTEN_FDS={}); airlock serve listens on exactly one: give the .socket unit a single ListenStream=",
            count.unwrap_or_default()
        ),
    }
    let passed = take_first(&mut fds)?;
    check_listening(&passed)?;
    Ok(Some(passed))
}

fn take_first(fds: &mut listenfd::ListenFd) -> Result<Passed> {
    let unix = fds.take_unix_listener(0);
    if let Ok(Some(listener)) = unix {
        return Ok(Passed::Unix(listener));
    }
    match fds.take_tcp_listener(0) {
        Ok(Some(listener)) => Ok(Passed::Tcp(listener)),
        Ok(None) => bail!("the socket systemd passed (LISTEN_FDS=1, descriptor 3) is not there"),
        Err(err) => bail!(
            "the socket systemd passed (LISTEN_FDS=1, descriptor 3) is neither a unix nor a TCP stream socket ({err}): use ListenStream= in the .socket unit"
        ),
    }
}

/// A connected socket (a `.socket` unit with `Accept=yes`) is not one to accept on.
fn check_listening(passed: &Passed) -> Result<()> {
    let fd = match passed {
        Passed::Unix(listener) => listener.as_fd(),
        Passed::Tcp(listener) => listener.as_fd(),
    };
    let listening = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::AcceptConn)
        .context("the socket systemd passed (LISTEN_FDS): cannot tell whether it listens")?;
    if !listening {
        bail!("the socket systemd passed (LISTEN_FDS) is not listening: airlock serve accepts its own connections — use Accept=no (the default) in the .socket unit");
    }
    Ok(())
}
