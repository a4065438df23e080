//! The command's stdout and stderr, relayed by the supervisor when their total is limited: the
//! first `limit` bytes pass through in order, the rest is read and dropped (so the command never
//! blocks on a full pipe for output nobody will see), and the caller learns how much was dropped.
//!
//! The relay never blocks the supervisor while the sandbox runs: it writes only when poll says
//! the destination can take a pipe buffer's worth, and stops reading the sandbox's pipe while it
//! holds unwritten bytes, so a slow reader slows the command down (as a plain pipe would) but
//! cannot stall the time limit, signal forwarding or the kill switch.
//!
//! When a destination fails (its reader went away, a full disk), that stream's pipe is closed:
//! the command's next write to it fails as it would on a plain pipe (SIGPIPE / EPIPE), so
//! `airlock run -- yes | head -1` ends as `yes | head -1` does. The other stream goes on.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::unistd::{read, write};

/// Largest write that cannot block on a pipe that poll reported writable.
const ATOMIC_WRITE: usize = libc::PIPE_BUF;

enum Sink {
    Stdout(std::io::Stdout),
    Stderr(std::io::Stderr),
}

impl Sink {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sink::Stdout(out) => out.as_fd(),
            Sink::Stderr(err) => err.as_fd(),
        }
    }
}

struct Stream {
    /// The read end of the sandbox's pipe; closed when the stream ends or its destination fails.
    from: Option<OwnedFd>,
    to: Sink,
    /// Read from the sandbox, kept, not yet written.
    pending: Vec<u8>,
    /// Why the destination could not take more, if it could not.
    failed: Option<Errno>,
    /// The last [`TAIL_BYTES`] passed on, kept for the session's record of the run.
    tail: std::collections::VecDeque<u8>,
    /// Every byte passed on.
    passed: u64,
}

/// Bytes of each stream's end kept for the run's record (what a person reviewing it sees).
pub const TAIL_BYTES: usize = 16 * 1024;

/// The end of each stream, as passed on (see [`TAIL_BYTES`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputTails {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Bytes passed on in all, each stream: more than its tail when the start was not kept.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

pub(crate) struct OutputRelay {
    streams: Vec<Stream>,
    left: u64,
    dropped: u64,
}

/// A stream whose destination failed: "stdout" or "stderr", and the error.
pub type OutputFailure = (&'static str, Errno);

/// The sandbox's ends of the pipes, to become its fds 1 and 2.
pub(crate) struct SandboxEnds {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// What one poll entry of the relay waits for.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    /// Output from the sandbox on stream `usize`.
    Readable(usize),
    /// Room at the destination of stream `usize`.
    Writable(usize),
}

impl OutputRelay {
    pub(crate) fn new(limit: u64) -> nix::Result<(OutputRelay, SandboxEnds)> {
        let flags = nix::fcntl::OFlag::O_CLOEXEC;
        let (out_read, out_write) = nix::unistd::pipe2(flags)?;
        let (err_read, err_write) = nix::unistd::pipe2(flags)?;
        let stream = |from, to| Stream {
            from: Some(from),
            to,
            pending: Vec::new(),
            failed: None,
            tail: std::collections::VecDeque::new(),
            passed: 0,
        };
        let relay = OutputRelay {
            streams: vec![
                stream(out_read, Sink::Stdout(std::io::stdout())),
                stream(err_read, Sink::Stderr(std::io::stderr())),
            ],
            left: limit,
            dropped: 0,
        };
        Ok((
            relay,
            SandboxEnds {
                stdout: out_write,
                stderr: err_write,
            },
        ))
    }

    /// What to poll for now.
    pub(crate) fn waits(&self) -> Vec<(Wait, BorrowedFd<'_>, PollFlags)> {
        let mut out = Vec::new();
        for (index, stream) in self.streams.iter().enumerate() {
            if !stream.pending.is_empty() {
                out.push((Wait::Writable(index), stream.to.fd(), PollFlags::POLLOUT));
            } else if let Some(from) = &stream.from {
                out.push((Wait::Readable(index), from.as_fd(), PollFlags::POLLIN));
            }
        }
        out
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The end of each stream as it was passed on.
    pub(crate) fn tails(&self) -> OutputTails {
        let tail = |index: usize| self.streams[index].tail.iter().copied().collect();
        OutputTails {
            stdout: tail(0),
            stderr: tail(1),
            stdout_bytes: self.streams[0].passed,
            stderr_bytes: self.streams[1].passed,
        }
    }

    /// The streams whose destination failed, and how.
    pub(crate) fn failures(&self) -> Vec<OutputFailure> {
        self.streams
            .iter()
            .filter_map(|stream| {
                let name = match stream.to {
                    Sink::Stdout(_) => "stdout",
                    Sink::Stderr(_) => "stderr",
                };
                stream.failed.map(|errno| (name, errno))
            })
            .collect()
    }

    /// Act on a ready poll entry, without blocking.
    pub(crate) fn on_ready(&mut self, wait: Wait) {
        match wait {
            Wait::Readable(index) => self.read_some(index),
            Wait::Writable(index) => self.write_some(index, ATOMIC_WRITE),
        }
    }

    fn read_some(&mut self, index: usize) {
        let Some(from) = &self.streams[index].from else {
            return;
        };
        let mut buf = [0u8; 64 * 1024];
        let n = loop {
            match read(from, &mut buf) {
                Err(Errno::EINTR) => continue,
                Ok(n) => break n,
                Err(_) => break 0,
            }
        };
        let stream = &mut self.streams[index];
        if n == 0 {
            stream.from = None;
            return;
        }
        let keep = (n as u64).min(self.left) as usize;
        self.left -= keep as u64;
        self.dropped += (n - keep) as u64;
        stream.pending.extend_from_slice(&buf[..keep]);
        stream.passed += keep as u64;
        let kept = &buf[keep.saturating_sub(TAIL_BYTES)..keep];
        stream.tail.extend(kept);
        let over = stream.tail.len().saturating_sub(TAIL_BYTES);
        stream.tail.drain(..over);
    }

    fn write_some(&mut self, index: usize, at_most: usize) {
        let stream = &mut self.streams[index];
        let chunk = stream.pending.len().min(at_most);
        match write(stream.to.fd(), &stream.pending[..chunk]) {
            Ok(n) => {
                stream.pending.drain(..n);
            }
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
            Err(errno) => {
                // Nothing more can be delivered on this stream: its pipe is closed, so the
                // command learns it as it would writing there itself.
                stream.failed = Some(errno);
                stream.pending.clear();
                stream.from = None;
            }
        }
    }

    /// After the sandbox is gone: deliver what is kept and read every stream to its end.
    /// Blocking is fine now: no limit is left to enforce.
    pub(crate) fn drain(&mut self) {
        for index in 0..self.streams.len() {
            loop {
                while !self.streams[index].pending.is_empty() {
                    self.write_some(index, usize::MAX);
                }
                if self.streams[index].from.is_none() {
                    break;
                }
                self.read_some(index);
            }
        }
    }
}
