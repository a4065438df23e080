//! Every ClientHello of a TLS handshake, not only the first. A server that answers the first
//! with a HelloRetryRequest (RFC 8446 4.1.4) reads a second one, and routes by the name in it: a
//! client could name an allowed host first and another host second (domain fronting one hello
//! late). So the client's bytes are followed as TLS records for as long as the handshake is in
//! plaintext, and each ClientHello must name the host the connection was made to.
//!
//! Where the plaintext ends is the server's word: its ServerHello that is not a retry request.
//! In TLS 1.3 the client's records are encrypted from then on; in TLS 1.2 the client's
//! ChangeCipherSpec marks it. So the server's records are followed too, up to that ServerHello,
//! and the client's side learns of it (through [`Handshake`]) before the client can: the server's
//! side records it before it passes the ServerHello on. A server may not take a second hello
//! after its ServerHello, so checking until then is enough. What either reader cannot read as a
//! plain TLS handshake closes the connection.
//!
//! A handshake may also start inside another protocol: PostgreSQL's client asks for TLS with an
//! 8-byte SSLRequest, which its server answers with one byte, `S` (TLS follows) or `N` (plain
//! from then on). Those bytes are passed on, and the handshake after them followed as above.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::http1::Refusal;
use crate::sni::{client_hello_server_name, u16_at, MAX_PEEK};

/// The random of a ServerHello that is a HelloRetryRequest: SHA-256 of "HelloRetryRequest"
/// (RFC 8446 4.1.3).
pub const HELLO_RETRY_REQUEST: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// The longest record TLS allows (a TLS 1.2 ciphertext: 2^14 + 2048).
const MAX_RECORD: usize = (1 << 14) + 2048;

const CHANGE_CIPHER_SPEC: u8 = 0x14;
const ALERT: u8 = 0x15;
const HANDSHAKE: u8 = 0x16;
const APPLICATION_DATA: u8 = 0x17;

/// How far the server has taken the handshake; shared by the two directions.
#[derive(Debug, Default)]
pub struct Handshake(AtomicU8);

/// What the server's ServerHello (not a retry request) chose, or that none came yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No ServerHello yet (perhaps a HelloRetryRequest): every client record is plaintext.
    Hello,
    /// TLS 1.3: the client's records are encrypted from here on.
    Tls13,
    /// TLS 1.2 or older: plaintext until the client's ChangeCipherSpec.
    Tls12,
    /// The server's side could not be read: the connection is closed.
    Broken,
    /// The server declined TLS (PostgreSQL's `N`): no handshake follows, nothing to follow.
    Plain,
}

impl Handshake {
    pub fn phase(&self) -> Phase {
        match self.0.load(Ordering::SeqCst) {
            0 => Phase::Hello,
            1 => Phase::Tls13,
            2 => Phase::Tls12,
            4 => Phase::Plain,
            _ => Phase::Broken,
        }
    }

    fn set(&self, phase: Phase) {
        let value = match phase {
            Phase::Hello => 0,
            Phase::Tls13 => 1,
            Phase::Tls12 => 2,
            Phase::Broken => 3,
            Phase::Plain => 4,
        };
        self.0.store(value, Ordering::SeqCst);
    }
}

/// A whole record: its type, its body, and its length with the header.
type Record<'a> = (u8, &'a [u8], usize);

/// The next whole record of `bytes`; None: not whole yet.
fn record(bytes: &[u8]) -> Result<Option<Record<'_>>, Refusal> {
    if bytes.len() < 5 {
        return Ok(None);
    }
    if bytes[1] != 3 || bytes[2] > 4 {
        return Err("a TLS record of an unknown version".into());
    }
    let len = u16_at(bytes, 3).unwrap_or(0);
    if len > MAX_RECORD {
        return Err("a TLS record longer than TLS allows".into());
    }
    Ok(bytes.get(5..5 + len).map(|body| (bytes[0], body, 5 + len)))
}

/// The next whole handshake message of `messages`: its type and body (4 bytes of header before
/// it). None: not whole yet.
fn message(messages: &[u8]) -> Result<Option<(u8, &[u8])>, Refusal> {
    if messages.len() < 4 {
        return Ok(None);
    }
    let len = (usize::from(messages[1]) << 16)
        | (usize::from(messages[2]) << 8)
        | usize::from(messages[3]);
    if len > MAX_PEEK {
        return Err("a TLS handshake message longer than the gate reads".into());
    }
    if messages.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((messages[0], &messages[4..4 + len])))
}

/// A change_cipher_spec record holds the one byte 1.
fn change_cipher_spec(body: &[u8]) -> Result<(), Refusal> {
    if body == [1] {
        Ok(())
    } else {
        Err("a TLS ChangeCipherSpec the gate cannot read".into())
    }
}

/// The client's side of a TLS connection to `name`, followed until the handshake leaves
/// plaintext; every byte of it goes through [`ClientHellos::feed`], the first hello's too.
pub struct ClientHellos {
    name: String,
    handshake: Arc<Handshake>,
    /// Bytes not passed on yet: records that hold part of a message not yet judged, then a
    /// record not yet whole.
    held: Vec<u8>,
    /// Of `held`, the bytes of whole records already read.
    read: usize,
    /// Handshake bytes of a message not yet whole.
    messages: Vec<u8>,
    /// Bytes of another protocol's request for TLS still to pass before the records start.
    preamble: usize,
    done: bool,
}

/// PostgreSQL's SSLRequest: length 8, then the code 80877103.
pub const POSTGRES_SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

impl ClientHellos {
    pub fn new(name: &str, handshake: Arc<Handshake>) -> ClientHellos {
        ClientHellos::after(name, handshake, 0)
    }

    /// A handshake that starts after `preamble` bytes of another protocol's request for TLS
    /// (a PostgreSQL SSLRequest), which pass unread.
    pub fn after(name: &str, handshake: Arc<Handshake>, preamble: usize) -> ClientHellos {
        ClientHellos {
            name: name.to_string(),
            handshake,
            held: Vec::new(),
            read: 0,
            messages: Vec::new(),
            preamble,
            done: false,
        }
    }

    /// The handshake has left plaintext: the rest need not be looked at.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Take `input` from the client; put in `out` what may go on to the server. Err: the
    /// connection must be closed.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        if self.done {
            out.extend_from_slice(input);
            return Ok(());
        }
        let preamble = self.preamble.min(input.len());
        out.extend_from_slice(&input[..preamble]);
        self.preamble -= preamble;
        self.held.extend_from_slice(&input[preamble..]);
        // Of `held`, what may go: whole records after which no message is left half-read.
        let mut passable = 0;
        loop {
            match self.handshake.phase() {
                Phase::Tls13 | Phase::Plain => self.done = true,
                Phase::Broken => {
                    return Err("the server's side of the TLS handshake cannot be read".into())
                }
                Phase::Hello | Phase::Tls12 => {}
            }
            if self.done {
                break;
            }
            let Some((kind, body, len)) = record(&self.held[self.read..])? else {
                break;
            };
            let body = body.to_vec();
            self.read += len;
            self.record(kind, &body)?;
            if self.messages.is_empty() {
                passable = self.read;
            }
        }
        if self.done {
            out.append(&mut self.held);
            self.read = 0;
            return Ok(());
        }
        out.extend(self.held.drain(..passable));
        self.read -= passable;
        if self.held.len() > MAX_PEEK + MAX_RECORD {
            return Err("a TLS handshake message longer than the gate reads".into());
        }
        Ok(())
    }

    /// Judge one whole record of the client's.
    fn record(&mut self, kind: u8, body: &[u8]) -> Result<(), Refusal> {
        let tls12 = self.handshake.phase() == Phase::Tls12;
        match kind {
            HANDSHAKE => {
                self.messages.extend_from_slice(body);
                // Judged in place and dropped at once: a record of many empty messages must
                // not cost a move of the rest after each.
                let mut at = 0;
                while let Some((kind, body)) = message(&self.messages[at..])? {
                    at += 4 + body.len();
                    self.judge(kind, body, tls12)?;
                }
                self.messages.drain(..at);
                Ok(())
            }
            CHANGE_CIPHER_SPEC => {
                change_cipher_spec(body)?;
                // TLS 1.3's is a dummy (RFC 8446 D.4), which may come before a second hello.
                self.done = tls12;
                Ok(())
            }
            ALERT => Ok(()),
            // Early data (0-RTT), sent with the first hello: a server that asks for a retry
            // skips it, and reads the second hello after it.
            APPLICATION_DATA if !tls12 => Ok(()),
            _ => Err("a TLS record the gate cannot read before the handshake is encrypted".into()),
        }
    }

    /// Judge one whole handshake message of the client's.
    fn judge(&self, kind: u8, body: &[u8], tls12: bool) -> Result<(), Refusal> {
        if kind != 1 {
            // TLS 1.2's client key exchange, certificate and its verify are plaintext; before
            // the server's hello only hellos are.
            return if tls12 {
                Ok(())
            } else {
                Err("a TLS handshake message other than ClientHello before the ServerHello".into())
            };
        }
        if tls12 {
            return Err("a ClientHello after the server's ServerHello".into());
        }
        let asked = client_hello_server_name(body)
            .map_err(|why| Refusal::Malformed(format!("a later TLS ClientHello: {why}")))?;
        if asked.as_deref() != Some(self.name.as_str()) {
            return Err(Refusal::OtherHost(format!(
                "connected to {} but a later ClientHello asked for {}: refused (domain fronting)",
                self.name,
                asked.as_deref().unwrap_or("no name")
            )));
        }
        Ok(())
    }
}

/// The server's side of a TLS connection, followed up to its ServerHello (past a
/// HelloRetryRequest), which it records in [`Handshake`] before it passes it on.
pub struct ServerHello {
    handshake: Arc<Handshake>,
    held: Vec<u8>,
    messages: Vec<u8>,
    retried: bool,
    /// The server's one-byte answer to a PostgreSQL SSLRequest comes first.
    answer: bool,
    done: bool,
}

impl ServerHello {
    pub fn new(handshake: Arc<Handshake>) -> ServerHello {
        ServerHello {
            handshake,
            held: Vec::new(),
            messages: Vec::new(),
            retried: false,
            answer: false,
            done: false,
        }
    }

    /// The server's side after a PostgreSQL SSLRequest: its answer, then (after `S`) the
    /// handshake.
    pub fn after_ssl_request(handshake: Arc<Handshake>) -> ServerHello {
        ServerHello {
            answer: true,
            ..ServerHello::new(handshake)
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// Take `input` from the server; put in `out` what may go on to the client. Err: the
    /// connection must be closed (and the client's side is told so).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        if self.done {
            out.extend_from_slice(input);
            return Ok(());
        }
        let read = self.read(input);
        if read.is_err() {
            self.handshake.set(Phase::Broken);
        }
        let read = read?;
        if self.done {
            out.append(&mut self.held);
        } else {
            out.extend(self.held.drain(..read));
        }
        Ok(())
    }

    /// Read the whole records held; how many bytes they were.
    fn read(&mut self, input: &[u8]) -> Result<usize, Refusal> {
        self.held.extend_from_slice(input);
        let mut at = 0;
        if self.answer {
            match self.held.first() {
                None => return Ok(0),
                Some(b'S') => {
                    self.answer = false;
                    at = 1;
                }
                Some(b'N') => {
                    // Declined: the client goes on in plain PostgreSQL, with no hello to check.
                    self.handshake.set(Phase::Plain);
                    self.done = true;
                    return Ok(self.held.len());
                }
                Some(_) => {
                    return Err("a PostgreSQL answer to SSLRequest the gate cannot read".into())
                }
            }
        }
        while let Some((kind, body, len)) = record(&self.held[at..])? {
            at += len;
            match kind {
                HANDSHAKE => self.messages.extend_from_slice(body),
                CHANGE_CIPHER_SPEC => change_cipher_spec(body)?,
                ALERT => {}
                _ => {
                    return Err(
                        "a TLS server record the gate cannot read before its ServerHello".into(),
                    )
                }
            }
            while let Some((kind, body)) = message(&self.messages)? {
                if kind != 2 {
                    return Err("a TLS server message other than ServerHello first".into());
                }
                let phase = server_hello(body)?;
                let len = 4 + body.len();
                self.messages.drain(..len);
                if phase == Phase::Hello {
                    if self.retried {
                        return Err("a second HelloRetryRequest".into());
                    }
                    self.retried = true;
                    continue;
                }
                self.handshake.set(phase);
                self.done = true;
                return Ok(at);
            }
        }
        if self.held.len() > MAX_PEEK + MAX_RECORD {
            return Err("a TLS ServerHello longer than the gate reads".into());
        }
        Ok(at)
    }
}

/// What a ServerHello chose: [`Phase::Hello`] for a HelloRetryRequest, else the version.
fn server_hello(body: &[u8]) -> Result<Phase, Refusal> {
    let short = || Refusal::Malformed("a TLS ServerHello cut short".into());
    let random = body.get(2..34).ok_or_else(short)?;
    if random == HELLO_RETRY_REQUEST {
        return Ok(Phase::Hello);
    }
    // version (2), random (32), session id, cipher suite (2), compression (1)
    let mut at = 34 + 1 + usize::from(*body.get(34).ok_or_else(short)?) + 3;
    if at > body.len() {
        return Err(short());
    }
    let mut selected = None;
    if at < body.len() {
        let extensions = u16_at(body, at).ok_or_else(short)?;
        at += 2;
        if at + extensions != body.len() {
            return Err("a TLS ServerHello whose extensions do not fill it".into());
        }
        while at < body.len() {
            let kind = u16_at(body, at).ok_or_else(short)?;
            let len = u16_at(body, at + 2).ok_or_else(short)?;
            let data = body.get(at + 4..at + 4 + len).ok_or_else(short)?;
            at += 4 + len;
            if kind == 0x002b {
                // supported_versions: the one version chosen.
                if len != 2 || selected.is_some() {
                    return Err(
                        "a TLS ServerHello's supported_versions the gate cannot read".into(),
                    );
                }
                selected = u16_at(data, 0);
            }
        }
    }
    match selected {
        Some(0x0304) => Ok(Phase::Tls13),
        Some(_) => Err("a TLS ServerHello choosing a version the gate does not know".into()),
        None => Ok(Phase::Tls12),
    }
}

#[cfg(test)]
mod tests;
