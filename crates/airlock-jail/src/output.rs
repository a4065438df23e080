//! The command's stdout and stderr, relayed by the supervisor when their total is limited: the
//! first `limit` bytes pass through in order, the rest is read and dropped (so the command never
//! blocks on a full pipe), and the caller learns how much was dropped.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::unistd::read;

struct Stream {
    from: OwnedFd,
    /// The supervisor's own stdout or stderr.
    to: Box<dyn Write>,
    open: bool,
}

pub(crate) struct OutputRelay {
    streams: Vec<Stream>,
    left: u64,
    dropped: u64,
    /// Whoever reads our own output went away: keep draining the sandbox, stop writing.
    sink_gone: bool,
}

/// The sandbox's ends of the pipes, to become its fds 1 and 2.
pub(crate) struct SandboxEnds {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl OutputRelay {
    pub(crate) fn new(limit: u64) -> nix::Result<(OutputRelay, SandboxEnds)> {
        let flags = nix::fcntl::OFlag::O_CLOEXEC;
        let (out_read, out_write) = nix::unistd::pipe2(flags)?;
        let (err_read, err_write) = nix::unistd::pipe2(flags)?;
        let relay = OutputRelay {
            streams: vec![
                Stream {
                    from: out_read,
                    to: Box::new(std::io::stdout()),
                    open: true,
                },
                Stream {
                    from: err_read,
                    to: Box::new(std::io::stderr()),
                    open: true,
                },
            ],
            left: limit,
            dropped: 0,
            sink_gone: false,
        };
        Ok((
            relay,
            SandboxEnds {
                stdout: out_write,
                stderr: err_write,
            },
        ))
    }

    /// The pipes still open, with their index, for poll.
    pub(crate) fn open_fds(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.open)
            .map(|(i, s)| (i, s.from.as_fd()))
            .collect()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Move what is ready on stream `index`; false once it reached its end.
    pub(crate) fn pump(&mut self, index: usize) -> bool {
        let mut buf = [0u8; 64 * 1024];
        let n = loop {
            match read(&self.streams[index].from, &mut buf) {
                Err(Errno::EINTR) => continue,
                Ok(n) => break n,
                Err(_) => break 0,
            }
        };
        let stream = &mut self.streams[index];
        if n == 0 {
            stream.open = false;
            return false;
        }
        let keep = (n as u64).min(self.left) as usize;
        self.left -= keep as u64;
        self.dropped += (n - keep) as u64;
        if keep > 0 && !self.sink_gone {
            let written = stream
                .to
                .write_all(&buf[..keep])
                .and_then(|()| stream.to.flush());
            self.sink_gone = written.is_err();
        }
        true
    }

    /// After the sandbox is gone: read every stream to its end.
    pub(crate) fn drain(&mut self) {
        for index in 0..self.streams.len() {
            while self.streams[index].open && self.pump(index) {}
        }
    }
}
