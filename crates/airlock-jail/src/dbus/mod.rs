//! The little of D-Bus that asking systemd for a run's scope takes: one method call on a
//! manager's private socket (peer to peer, no bus daemon), and its reply.
//!
//! Hand-written rather than a crate's: the one well-kept Rust implementation (zbus) runs its
//! connection on a thread of its own, and the supervisor that calls this is a process that forks
//! and must stay single-threaded. What is read is bounded and checked at every step (see
//! [`parse_reply`], fuzzed by fuzz/fuzz_targets/dbus_reply.rs); nothing read is trusted beyond
//! "did systemd say yes, and if not, what did it say".

use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A value of a method call's body (only the types systemd's transient units are given here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Bool(bool),
    U64(u64),
    U32Array(Vec<u32>),
}

impl Value {
    fn signature(&self) -> &'static str {
        match self {
            Value::Str(_) => "s",
            Value::Bool(_) => "b",
            Value::U64(_) => "t",
            Value::U32Array(_) => "au",
        }
    }
}

/// The body of a method call: what the callers here send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Str(String),
    /// `a(sv)`: named properties.
    Properties(Vec<(String, Value)>),
    /// `a(sa(sv))` with no element (StartTransientUnit's auxiliary units).
    NoAuxiliaryUnits,
}

impl Arg {
    fn signature(&self) -> &'static str {
        match self {
            Arg::Str(_) => "s",
            Arg::Properties(_) => "a(sv)",
            Arg::NoAuxiliaryUnits => "a(sa(sv))",
        }
    }
}

/// A D-Bus message in the making, little-endian. Offsets are from the message's start; the body
/// starts on an 8-byte boundary, so a body written on its own pads exactly as it would in place.
#[derive(Default)]
struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    fn pad_to(&mut self, alignment: usize) {
        while !self.bytes.len().is_multiple_of(alignment) {
            self.bytes.push(0);
        }
    }

    fn byte(&mut self, value: u8) {
        self.bytes.push(value);
    }

    fn u32(&mut self, value: u32) {
        self.pad_to(4);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.pad_to(8);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    fn string(&mut self, value: &str) {
        self.u32(value.len() as u32);
        self.bytes.extend_from_slice(value.as_bytes());
        self.bytes.push(0);
    }

    fn signature(&mut self, value: &str) {
        self.byte(value.len() as u8);
        self.bytes.extend_from_slice(value.as_bytes());
        self.bytes.push(0);
    }

    /// An array: its length in bytes, padding to its elements' alignment (there even when it is
    /// empty), then the elements.
    fn array(&mut self, element_alignment: usize, elements: impl FnOnce(&mut Writer)) {
        self.u32(0);
        let length_at = self.bytes.len() - 4;
        self.pad_to(element_alignment);
        let start = self.bytes.len();
        elements(self);
        let length = (self.bytes.len() - start) as u32;
        self.bytes[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
    }

    fn variant(&mut self, value: &Value) {
        self.signature(value.signature());
        match value {
            Value::Str(text) => self.string(text),
            Value::Bool(yes) => self.u32(u32::from(*yes)),
            Value::U64(number) => self.u64(*number),
            Value::U32Array(numbers) => self.array(4, |w| numbers.iter().for_each(|n| w.u32(*n))),
        }
    }

    fn arg(&mut self, arg: &Arg) {
        match arg {
            Arg::Str(text) => self.string(text),
            Arg::Properties(properties) => self.array(8, |w| {
                for (name, value) in properties {
                    w.pad_to(8);
                    w.string(name);
                    w.variant(value);
                }
            }),
            Arg::NoAuxiliaryUnits => self.array(8, |_| {}),
        }
    }
}

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SIGNATURE: u8 = 8;

/// A method call to `destination`'s object `path`.
pub struct MethodCall<'a> {
    pub destination: &'a str,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub args: Vec<Arg>,
}

/// The call as bytes on the wire, numbered `serial` (not 0).
pub fn encode(call: &MethodCall<'_>, serial: u32) -> Vec<u8> {
    let mut body = Writer::default();
    call.args.iter().for_each(|arg| body.arg(arg));
    let signature: String = call.args.iter().map(Arg::signature).collect();
    let mut message = Writer::default();
    message.bytes.extend_from_slice(&[b'l', METHOD_CALL, 0, 1]);
    message.u32(body.bytes.len() as u32);
    message.u32(serial);
    let field = |w: &mut Writer, code: u8, type_code: &str, write: &dyn Fn(&mut Writer)| {
        w.pad_to(8);
        w.byte(code);
        w.signature(type_code);
        write(w);
    };
    message.array(8, |w| {
        field(w, FIELD_PATH, "o", &|w| w.string(call.path));
        field(w, FIELD_INTERFACE, "s", &|w| w.string(call.interface));
        field(w, FIELD_MEMBER, "s", &|w| w.string(call.member));
        field(w, FIELD_DESTINATION, "s", &|w| w.string(call.destination));
        if !signature.is_empty() {
            field(w, FIELD_SIGNATURE, "g", &|w| w.signature(&signature));
        }
    });
    message.pad_to(8);
    message.bytes.extend_from_slice(&body.bytes);
    message.bytes
}

/// Largest header-field array and body read from the peer; systemd's replies here are well
/// under a kilobyte.
const MAX_FIELDS: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;

/// How much of a peer's error message goes into airlock's own error (and from there into logs
/// and answers): systemd's are a line.
const MAX_ERROR_TEXT: usize = 512;

/// `text` cut to at most `limit` bytes, on a character's boundary, saying so.
fn at_most(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" [cut]");
    }
    text
}

/// What a message read from the peer says, as far as a caller here needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The serial of the call this answers (None: a signal or a call, not for us).
    pub reply_serial: Option<u32>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A method return; its first argument when that is a string or an object path.
    Returned(Option<String>),
    /// An error: its name and, when the body starts with a string, the message.
    Failed { name: String, message: String },
    /// A signal or anything else.
    Other,
}

/// Why bytes from the peer were not a message this reader accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed D-Bus message from systemd: {0}")]
pub struct Malformed(&'static str);

/// A reader over one message's bytes, for either byte order.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    big_endian: bool,
}

impl<'a> Reader<'a> {
    fn skip_to(&mut self, alignment: usize) -> Result<(), Malformed> {
        let aligned = self.at.div_ceil(alignment) * alignment;
        if aligned > self.bytes.len() {
            return Err(Malformed("padding runs past the end"));
        }
        self.at = aligned;
        Ok(())
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .at
            .checked_add(count)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(Malformed("a value runs past the end"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        self.skip_to(4)?;
        let raw: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| Malformed("short u32"))?;
        Ok(if self.big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        })
    }

    /// A string or object path: length, UTF-8 bytes, a NUL.
    fn string(&mut self) -> Result<String, Malformed> {
        let length = self.u32()? as usize;
        let text = self.take(length)?;
        if self.byte()? != 0 {
            return Err(Malformed("a string without its NUL"));
        }
        String::from_utf8(text.to_vec()).map_err(|_| Malformed("a string that is not UTF-8"))
    }

    fn signature(&mut self) -> Result<String, Malformed> {
        let length = usize::from(self.byte()?);
        let text = self.take(length)?;
        if self.byte()? != 0 {
            return Err(Malformed("a signature without its NUL"));
        }
        String::from_utf8(text.to_vec()).map_err(|_| Malformed("a signature that is not ASCII"))
    }
}

/// The fixed start of every message: byte order, type, flags, version, body length, serial, and
/// the header fields' length. From it, how many bytes the whole message takes.
pub const FIXED_HEADER: usize = 16;

/// The whole message's length, from its first [`FIXED_HEADER`] bytes.
pub fn message_length(fixed: &[u8; FIXED_HEADER]) -> Result<usize, Malformed> {
    let big_endian = match fixed[0] {
        b'l' => false,
        b'B' => true,
        _ => return Err(Malformed("unknown byte order")),
    };
    if fixed[3] != 1 {
        return Err(Malformed("unknown protocol version"));
    }
    let number = |raw: [u8; 4]| {
        if big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        }
    };
    let body = number([fixed[4], fixed[5], fixed[6], fixed[7]]) as usize;
    let fields = number([fixed[12], fixed[13], fixed[14], fixed[15]]) as usize;
    if fields > MAX_FIELDS || body > MAX_BODY {
        return Err(Malformed("a message larger than any systemd sends here"));
    }
    Ok((FIXED_HEADER + fields).div_ceil(8) * 8 + body)
}

/// Read one whole message (as [`message_length`] sized it).
pub fn parse_reply(message: &[u8]) -> Result<Reply, Malformed> {
    let fixed: &[u8; FIXED_HEADER] = message
        .get(..FIXED_HEADER)
        .and_then(|start| start.try_into().ok())
        .ok_or(Malformed("shorter than a header"))?;
    if message_length(fixed)? != message.len() {
        return Err(Malformed("its length is not what its header says"));
    }
    let mut reader = Reader {
        bytes: message,
        at: 12,
        big_endian: fixed[0] == b'B',
    };
    let kind = fixed[1];
    let fields_length = reader.u32()? as usize;
    let fields_end = FIXED_HEADER + fields_length;
    let (mut reply_serial, mut error_name, mut signature) = (None, None, String::new());
    while reader.at < fields_end {
        reader.skip_to(8)?;
        let code = reader.byte()?;
        let type_code = reader.signature()?;
        match (code, type_code.as_str()) {
            (FIELD_REPLY_SERIAL, "u") => reply_serial = Some(reader.u32()?),
            (FIELD_ERROR_NAME, "s") => error_name = Some(reader.string()?),
            (FIELD_SIGNATURE, "g") => signature = reader.signature()?,
            (_, "s" | "o") => drop(reader.string()?),
            (_, "u" | "h") => drop(reader.u32()?),
            (_, "g") => drop(reader.signature()?),
            _ => return Err(Malformed("a header field of an unknown type")),
        }
        if reader.at > fields_end {
            return Err(Malformed("a header field runs past the fields' end"));
        }
    }
    reader.skip_to(8)?;
    let first_string = |reader: &mut Reader<'_>| -> Result<Option<String>, Malformed> {
        match signature.chars().next() {
            Some('s' | 'o') => reader.string().map(Some),
            _ => Ok(None),
        }
    };
    let outcome = match kind {
        METHOD_RETURN => Outcome::Returned(first_string(&mut reader)?),
        ERROR => Outcome::Failed {
            name: error_name.ok_or(Malformed("an error without its name"))?,
            message: at_most(
                first_string(&mut reader)?.unwrap_or_default(),
                MAX_ERROR_TEXT,
            ),
        },
        _ => Outcome::Other,
    };
    Ok(Reply {
        reply_serial,
        outcome,
    })
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot talk to systemd at {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("systemd at {path} gave no answer within {} s", within.as_secs_f32())]
    TimedOut { path: String, within: Duration },
    #[error("systemd at {path} refused the login (EXTERNAL, uid {uid}): {answer:?}")]
    Auth {
        path: String,
        uid: u32,
        answer: String,
    },
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("systemd answered {name}: {message}")]
    Refused { name: String, message: String },
}

/// How long a connection may take, from connecting to the last answer (a manager busy starting
/// units answers in milliseconds; one that hangs, or a peer that trickles bytes, must not hang
/// the run).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a manager's private socket (peer to peer, no bus daemon), logged in.
pub struct Connection {
    path: String,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// When everything on this connection must be done by, and how long that was.
    deadline: Instant,
    timeout: Duration,
    serial: u32,
}

/// The process at the other end of a connection, as the kernel tells it (SO_PEERCRED): its pid
/// in this process's pid namespace (0 when it is not in it or below it), and its uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
}

/// `socket` connected, waiting no longer than `timeout`: a unix socket's connect waits for room
/// in the listener's queue for as long as the socket's send timeout, set before it.
fn connect(socket: &Path, timeout: Duration) -> std::io::Result<UnixStream> {
    use nix::sys::socket::{self as sock, sockopt, AddressFamily, SockFlag, SockType, UnixAddr};
    let fd = sock::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let timeout =
        nix::sys::time::TimeVal::new(timeout.as_secs() as i64, i64::from(timeout.subsec_micros()));
    sock::setsockopt(&fd, sockopt::SendTimeout, &timeout)?;
    sock::connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &UnixAddr::new(socket)?,
    )?;
    Ok(UnixStream::from(fd))
}

impl Connection {
    /// Connect to `socket` and log in as `uid` (SASL EXTERNAL: the kernel tells the peer who we
    /// really are; the uid we name must be it).
    pub fn open(socket: &Path, uid: u32) -> Result<Connection, CallError> {
        Connection::open_within(socket, uid, TIMEOUT)
    }

    /// [`Connection::open`], with everything on the connection done within `timeout`.
    fn open_within(socket: &Path, uid: u32, timeout: Duration) -> Result<Connection, CallError> {
        let deadline = Instant::now() + timeout;
        let path = socket.display().to_string();
        let stream = connect(socket, timeout).map_err(|source| match source.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::TimedOut {
                path: path.clone(),
                within: timeout,
            },
            _ => failed(&path, source),
        })?;
        let reader = BufReader::new(stream.try_clone().map_err(|source| failed(&path, source))?);
        let mut connection = Connection {
            path,
            reader,
            writer: stream,
            deadline,
            timeout,
            serial: 0,
        };
        // A NUL, then EXTERNAL with the uid as hex digits of its decimal form.
        let uid_hex: String = uid
            .to_string()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        connection.send(format!("\0AUTH EXTERNAL {uid_hex}\r\n").as_bytes())?;
        let mut answer = Vec::new();
        while !answer.ends_with(b"\n") && answer.len() < 512 {
            let mut byte = [0u8; 1];
            connection.receive(&mut byte)?;
            answer.push(byte[0]);
        }
        let answer = String::from_utf8_lossy(&answer).trim_end().to_string();
        if !answer.starts_with("OK ") {
            return Err(CallError::Auth {
                path: connection.path,
                uid,
                answer,
            });
        }
        connection.send(b"BEGIN\r\n")?;
        Ok(connection)
    }

    /// The time left before the deadline, as the stream's timeout for one read or write.
    fn time_left(&self) -> Result<Duration, CallError> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| CallError::TimedOut {
                path: self.path.clone(),
                within: self.timeout,
            })
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), CallError> {
        let left = self.time_left()?;
        let result = self
            .writer
            .set_write_timeout(Some(left))
            .and_then(|()| self.writer.write_all(bytes));
        result.map_err(|source| self.io_failed(source))
    }

    /// Exactly `buffer.len()` bytes, each read within the time left.
    fn receive(&mut self, buffer: &mut [u8]) -> Result<(), CallError> {
        let mut filled = 0;
        while filled < buffer.len() {
            let left = self.time_left()?;
            let read = self
                .reader
                .get_ref()
                .set_read_timeout(Some(left))
                .and_then(|()| self.reader.read(&mut buffer[filled..]));
            match read {
                Ok(0) => {
                    return Err(self.io_failed(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(count) => filled += count,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(self.io_failed(error)),
            }
        }
        Ok(())
    }

    /// An I/O error, or the deadline when that is what it was.
    fn io_failed(&self, source: std::io::Error) -> CallError {
        match source.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => CallError::TimedOut {
                path: self.path.clone(),
                within: self.timeout,
            },
            _ => failed(&self.path, source),
        }
    }

    /// Who is at the other end.
    pub fn peer(&self) -> Result<Peer, CallError> {
        let credentials =
            nix::sys::socket::getsockopt(&self.writer, nix::sys::socket::sockopt::PeerCredentials)
                .map_err(|errno| failed(&self.path, errno.into()))?;
        Ok(Peer {
            pid: credentials.pid(),
            uid: credentials.uid(),
        })
    }

    /// Make `call`; the first string of its answer. Messages that are not its answer (signals a
    /// manager sends every client of its private socket) are read past until the deadline.
    pub fn call(&mut self, call: &MethodCall<'_>) -> Result<Option<String>, CallError> {
        self.serial += 1;
        let serial = self.serial;
        self.send(&encode(call, serial))?;
        loop {
            let mut fixed = [0u8; FIXED_HEADER];
            self.receive(&mut fixed)?;
            let mut message = vec![0u8; message_length(&fixed)?];
            message[..FIXED_HEADER].copy_from_slice(&fixed);
            self.receive(&mut message[FIXED_HEADER..])?;
            let reply = parse_reply(&message)?;
            if reply.reply_serial != Some(serial) {
                continue;
            }
            return match reply.outcome {
                Outcome::Returned(first) => Ok(first),
                Outcome::Failed { name, message } => Err(CallError::Refused { name, message }),
                Outcome::Other => Err(CallError::Malformed(Malformed(
                    "an answer that is neither a return nor an error",
                ))),
            };
        }
    }
}

fn failed(path: &str, source: std::io::Error) -> CallError {
    CallError::Io {
        path: path.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests;
