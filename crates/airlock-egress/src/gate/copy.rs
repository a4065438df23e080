//! Copying a relayed connection's bytes both ways once it is allowed: through a pipe with
//! splice where the bytes need not be looked at, and request by request for plain HTTP.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use crate::http1::{FirstAnswer, Refusal, Requests};
use crate::tls::{ClientHellos, ServerHello};

/// How a direction's bytes are looked at before they go on.
pub(super) enum Watch {
    /// Not at all.
    None,
    /// Plain HTTP: every request (client to server only).
    Http(Requests),
    /// TLS: each direction's records until the handshake is encrypted.
    Tls(ClientHellos, ServerHello),
}

/// A reader that a direction's bytes go through until it is done with them.
trait Follow {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal>;
    fn done(&self) -> bool;
}

impl Follow for ClientHellos {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        ClientHellos::feed(self, input, out)
    }
    fn done(&self) -> bool {
        ClientHellos::done(self)
    }
}

impl Follow for ServerHello {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        ServerHello::feed(self, input, out)
    }
    fn done(&self) -> bool {
        ServerHello::done(self)
    }
}

/// The bytes each way, once both directions have ended.
pub(super) struct Copied {
    /// Client to server after the first bytes; Err: a request was refused (bytes copied until
    /// then, and why).
    pub(super) out: Result<u64, (u64, Refusal)>,
    /// Server to client; Err: the server's TLS handshake could not be read.
    pub(super) bytes_in: Result<u64, (u64, Refusal)>,
}

/// Copy `client` to `upstream` and back until both are done, each direction looked at as
/// `watch` says. None: the connection could not be split into its two directions.
pub(super) fn both_ways(
    mut client: TcpStream,
    mut upstream: TcpStream,
    watch: Watch,
    first_answer: &FirstAnswer,
) -> Option<Copied> {
    let (requests, hellos, mut server_hello) = match watch {
        Watch::None => (None, None, None),
        Watch::Http(requests) => (Some(requests), None, None),
        Watch::Tls(hellos, server_hello) => (None, Some(hellos), Some(server_hello)),
    };
    let watch_first_answer = requests
        .as_ref()
        .is_some_and(Requests::first_asked_to_upgrade);
    let (Ok(mut client_read), Ok(mut upstream_read)) = (client.try_clone(), upstream.try_clone())
    else {
        return None;
    };
    let out_thread = std::thread::spawn(move || {
        let outcome = match (requests, hellos) {
            (Some(requests), _) => copy_requests(&mut client_read, &mut upstream, requests),
            (None, Some(mut hellos)) => {
                copy_following(&mut client_read, &mut upstream, &mut hellos)
            }
            (None, None) => Ok(copy(&mut client_read, &mut upstream)),
        };
        let _ = upstream.shutdown(Shutdown::Write);
        if outcome.is_err() {
            // The other direction ends too: the connection is over.
            let _ = upstream.shutdown(Shutdown::Both);
            let _ = client_read.shutdown(Shutdown::Both);
        }
        outcome
    });
    // When the first request asked to switch protocols, the server's first status line tells
    // whether it did; the request side waits for it.
    let mut bytes_in = 0;
    if watch_first_answer {
        let status = first_line(&mut upstream_read);
        first_answer.saw(&status);
        bytes_in += status.len() as u64;
        if client.write_all(&status).is_err() {
            let _ = upstream_read.shutdown(Shutdown::Both);
        }
    }
    let incoming = match &mut server_hello {
        Some(server_hello) => copy_following(&mut upstream_read, &mut client, server_hello),
        None => Ok(copy(&mut upstream_read, &mut client)),
    };
    let _ = client.shutdown(Shutdown::Write);
    if incoming.is_err() {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream_read.shutdown(Shutdown::Both);
    }
    let bytes_in = match incoming {
        Ok(n) => Ok(bytes_in + n),
        Err((n, refusal)) => Err((bytes_in + n, refusal)),
    };
    let out = out_thread.join().unwrap_or(Ok(0));
    Some(Copied { out, bytes_in })
}

/// Copy through `follow` until it is done with the bytes, then as [`copy`] does. Err: it
/// refused them (bytes copied until then, and why); what it refused is not passed on.
fn copy_following(
    from: &mut TcpStream,
    to: &mut TcpStream,
    follow: &mut impl Follow,
) -> Result<u64, (u64, Refusal)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(buf.len());
    let mut total = 0u64;
    while !follow.done() {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Ok(total),
        };
        out.clear();
        if let Err(refusal) = follow.feed(&buf[..n], &mut out) {
            return Err((total, refusal));
        }
        if to.write_all(&out).is_err() {
            return Ok(total);
        }
        total += out.len() as u64;
    }
    Ok(total + copy(from, to))
}

/// Copy until end of file or an error; the bytes copied. Through a pipe with splice, so the bytes
/// never come up to this process; a plain read/write loop where splice is refused.
pub(super) fn copy(from: &mut TcpStream, to: &mut TcpStream) -> u64 {
    use nix::errno::Errno;
    use nix::fcntl::{splice, SpliceFFlags};
    if let Ok((pipe_read, pipe_write)) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        let _ = nix::fcntl::fcntl(&pipe_write, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
        // Not SPLICE_F_MORE: it corks the socket, and the last bytes of a message would wait
        // (200 ms) for more that the sender, waiting for an answer, never sends. The kernel
        // sets MSG_MORE itself while the pipe still holds bytes.
        let flags = SpliceFFlags::SPLICE_F_MOVE;
        let mut total = 0u64;
        loop {
            let n = match splice(&*from, None, &pipe_write, None, 1 << 20, flags) {
                Ok(0) => return total,
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EINVAL) if total == 0 => break,
                Err(_) => return total,
            };
            let mut left = n;
            while left > 0 {
                match splice(&pipe_read, None, &*to, None, left, flags) {
                    Ok(0) => return total,
                    Ok(m) => left -= m,
                    Err(Errno::EINTR) => continue,
                    Err(_) => return total,
                }
            }
            total += n as u64;
        }
    }
    copy_plain(from, to)
}

/// [`copy`] by read and write.
fn copy_plain(from: &mut TcpStream, to: &mut TcpStream) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return total;
                }
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return total,
        }
    }
}

/// The server's first bytes, read until they hold its first line (or 1 KiB, or end of file);
/// whatever else came with them too, so the client gets them in one piece as before.
fn first_line(from: &mut TcpStream) -> Vec<u8> {
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while line.len() < 1024 && !line.contains(&b'\n') {
        match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    line
}

/// [`copy`] for plain HTTP: the client's requests pass only as [`Requests`] lets them. Err: a
/// request was refused (bytes copied, and why).
fn copy_requests(
    from: &mut TcpStream,
    to: &mut TcpStream,
    mut requests: Requests,
) -> Result<u64, (u64, Refusal)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(buf.len());
    let mut total = 0u64;
    loop {
        out.clear();
        // Bytes held after an upgrade (those that came with the request itself, too) go on
        // once the server has answered, without waiting for the client to send more.
        let mut verdict = Ok(());
        if !requests.waiting() {
            let n = match from.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Ok(total),
            };
            verdict = requests.feed(&buf[..n], &mut out);
        }
        // After an upgrade the bytes wait for the server's first answer (10 s at most).
        let deadline = Instant::now() + Duration::from_secs(10);
        while verdict.is_ok() && requests.waiting() {
            if Instant::now() > deadline {
                verdict = Err("the server did not answer an upgrade within 10 s".into());
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
            verdict = requests.settle(&mut out);
        }
        if to.write_all(&out).is_err() {
            return Ok(total);
        }
        total += out.len() as u64;
        if let Err(refusal) = verdict {
            return Err((total, refusal));
        }
    }
}
