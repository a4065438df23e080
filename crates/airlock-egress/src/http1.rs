//! Every request on a plain-HTTP connection, not only the first. A client may keep a connection
//! to an allowed name open and send its next request for another host, which a shared server (a
//! CDN, a virtual-hosting front end) would serve: domain fronting one request late. So the gate
//! follows the requests' framing (Content-Length, chunked) from head to head and checks each.
//!
//! Where the gate and a server could disagree on where a request ends (request smuggling), the
//! connection is refused instead: both Content-Length and Transfer-Encoding, differing
//! Content-Lengths, a transfer coding other than `chunked`, bare CR or LF in a head, folded
//! header lines, whitespace before a header's colon.

/// The longest request head (or chunk-size line, or trailer section) the gate holds.
pub const MAX_HEAD: usize = 64 * 1024;

/// Why the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A later request named another host (the rule says which).
    OtherHost(String),
    /// Bytes the gate cannot follow as HTTP/1 requests the way every server would.
    Malformed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::OtherHost(rule) | Refusal::Malformed(rule) => f.write_str(rule),
        }
    }
}

impl From<String> for Refusal {
    fn from(rule: String) -> Refusal {
        Refusal::Malformed(rule)
    }
}

impl From<&str> for Refusal {
    fn from(rule: &str) -> Refusal {
        Refusal::Malformed(rule.to_string())
    }
}

/// Where the stream from the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum At {
    /// In a request head, held until it is complete and checked.
    Head,
    /// In a body of known length: this many bytes left.
    Body(u64),
    /// In the body of a GET or HEAD (this many bytes left), which some servers do not read and
    /// would take for the start of the next request: see [`QuietBody`].
    QuietBody(u64, QuietBody),
    /// In a chunk-size line.
    ChunkSize,
    /// In a chunk's data: this many bytes left, then its CRLF.
    ChunkData(u64),
    /// The CRLF after a chunk's data: this many bytes of it seen.
    ChunkEnd(u8),
    /// In the trailer section after the last chunk.
    Trailers,
    /// After a request that asked to switch protocols: the server's answer (its first status
    /// line, see [`FirstAnswer`]) tells whether it did; until then, the client's bytes are held.
    AfterUpgrade,
    /// A tunnel or a switched protocol: no more HTTP requests to follow.
    Opaque,
}

/// What the gate has seen of a GET's or HEAD's body. Such a body passes only if no server that
/// ignores it could read it as a request: its first byte, after what servers skip before a
/// request line, is not a token character (JSON's `{` or `[` is not), and it holds no `HTTP/`
/// in any case (the version a request line for another host would need; HTTP/0.9 lines, which
/// have none, are only read at the start of a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QuietBody {
    /// A byte other than space has been seen (and was not a token character).
    started: bool,
    /// How many bytes of `HTTP/` end what was seen.
    version_seen: u8,
}

impl QuietBody {
    /// Take the next bytes of the body; Err if a server ignoring the body could read them as a
    /// request.
    fn see(&mut self, bytes: &[u8]) -> Result<(), Refusal> {
        for &b in bytes {
            if !self.started && !crate::sni::split_space(b) {
                if tchar(b) {
                    return Err(Refusal::Malformed(
                        "a GET or HEAD body that a server ignoring it could read as the next request".into(),
                    ));
                }
                self.started = true;
            }
            // In any case: a lenient server may take `http/` too.
            let b = b.to_ascii_uppercase();
            let want = b"HTTP/"[self.version_seen as usize];
            self.version_seen = if b == want {
                self.version_seen + 1
            } else {
                u8::from(b == b'H')
            };
            if self.version_seen == 5 {
                return Err(Refusal::Malformed(
                    "a GET or HEAD body with HTTP/ in it, which a server ignoring the body could read as a request".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Checks the requests a client sends on a connection to `host`.
#[derive(Debug)]
pub struct Requests {
    host: String,
    at: At,
    /// Bytes of the current head, chunk-size line or trailers.
    held: Vec<u8>,
    /// The request being framed asked to switch protocols (Upgrade).
    upgrade: bool,
    /// Requests checked so far.
    requests: u64,
    /// What the server answered first (set by whoever copies the server's bytes).
    first_answer: std::sync::Arc<FirstAnswer>,
}

/// The status of the server's first answer on a connection, as the copier of the server's bytes
/// saw it: whether a protocol switch asked for by the first request happened (101) or not.
#[derive(Debug, Default)]
pub struct FirstAnswer(std::sync::atomic::AtomicU8);

impl FirstAnswer {
    const UNKNOWN: u8 = 0;
    const SWITCHED: u8 = 1;
    const OTHER: u8 = 2;

    /// Record the server's first bytes (its first status line, complete or not).
    pub fn saw(&self, status_line: &[u8]) {
        let switched =
            status_line.starts_with(b"HTTP/1.1 101 ") || status_line.starts_with(b"HTTP/1.0 101 ");
        let value = if switched {
            Self::SWITCHED
        } else {
            Self::OTHER
        };
        self.0.store(value, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(&self) -> u8 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Requests {
    /// For a connection made to `host` (lower case, no trailing dot, no port).
    pub fn new(host: &str, first_answer: std::sync::Arc<FirstAnswer>) -> Requests {
        Requests {
            host: host.to_string(),
            at: At::Head,
            held: Vec::new(),
            upgrade: false,
            requests: 0,
            first_answer,
        }
    }

    /// The first request asked to switch protocols: the server's first answer is needed (and
    /// only then: other connections' answers are not looked at).
    pub fn first_asked_to_upgrade(&self) -> bool {
        self.requests == 1 && (self.upgrade || self.at == At::AfterUpgrade)
    }

    /// Client bytes are held until the server's first answer is known (see [`Requests::settle`]).
    pub fn waiting(&self) -> bool {
        self.at == At::AfterUpgrade && !self.held.is_empty()
    }

    /// Go on with held bytes once the server's first answer is known; still waiting: nothing.
    pub fn settle(&mut self, out: &mut Vec<u8>) -> Result<(), Refusal> {
        if self.at != At::AfterUpgrade || self.first_answer.get() == FirstAnswer::UNKNOWN {
            return Ok(());
        }
        self.at = if self.first_answer.get() == FirstAnswer::SWITCHED {
            At::Opaque
        } else {
            At::Head
        };
        let held = std::mem::take(&mut self.held);
        self.feed(&held, out)
    }

    /// Take the client's next bytes; append to `out` what may go to the server now. Err: the
    /// connection must be closed, and why. A head is passed on only once complete and checked.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
        // Each step takes what it can of the input in the state it is for, and leaves the rest
        // to the state it moved to.
        while !input.is_empty() {
            input = match self.at {
                At::Opaque => {
                    out.extend_from_slice(input);
                    &[]
                }
                At::AfterUpgrade => self.feed_after_upgrade(input, out)?,
                At::Head => self.feed_head(input, out)?,
                At::QuietBody(left, seen) => self.feed_quiet_body(left, seen, input, out)?,
                At::Body(left) => {
                    let (rest, left) = pass_on(left, input, out);
                    self.at = if left == 0 {
                        self.after_request()
                    } else {
                        At::Body(left)
                    };
                    rest
                }
                At::ChunkSize => self.feed_chunk_size(input, out)?,
                At::ChunkData(left) => {
                    let (rest, left) = pass_on(left, input, out);
                    self.at = if left == 0 {
                        At::ChunkEnd(0)
                    } else {
                        At::ChunkData(left)
                    };
                    rest
                }
                At::ChunkEnd(seen) => self.feed_chunk_end(seen, input, out)?,
                At::Trailers => self.feed_trailers(input, out)?,
            };
        }
        Ok(())
    }

    /// Switched (101), or declined and these bytes are the next request: only the server's
    /// answer says which, so they wait for it.
    fn feed_after_upgrade<'a>(
        &mut self,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        if self.first_answer.get() == FirstAnswer::UNKNOWN {
            self.held.extend_from_slice(input);
            if self.held.len() > MAX_HEAD {
                return Err("more than 64 KiB sent before the server answered an upgrade".into());
            }
            return Ok(&[]);
        }
        // The answer is known: the held bytes go first, then the input in the state they left.
        self.settle(out)?;
        Ok(input)
    }

    /// Hold a request head until it is complete, then check it and pass it on.
    fn feed_head<'a>(
        &mut self,
        mut input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        // Servers skip empty lines before a request (RFC 9112 2.2).
        if self.held.is_empty() {
            let skip = input
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .unwrap_or(input.len());
            out.extend_from_slice(&input[..skip]);
            input = &input[skip..];
            if input.is_empty() {
                return Ok(input);
            }
        }
        let (rest, complete) = self.hold_until(input, b"\r\n\r\n");
        if !complete {
            if self.held.len() > MAX_HEAD {
                return Err("a request head longer than 64 KiB".into());
            }
            return Ok(rest);
        }
        let head = std::mem::take(&mut self.held);
        self.at = self.check_head(&head)?;
        out.extend_from_slice(&head);
        Ok(rest)
    }

    /// Pass on what the input holds of a GET's or HEAD's body, once checked (see [`QuietBody`]).
    fn feed_quiet_body<'a>(
        &mut self,
        left: u64,
        mut seen: QuietBody,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        let n = (left.min(input.len() as u64)) as usize;
        seen.see(&input[..n])?;
        let (rest, left) = pass_on(left, input, out);
        self.at = if left == 0 {
            self.after_request()
        } else {
            At::QuietBody(left, seen)
        };
        Ok(rest)
    }

    /// Hold a chunk-size line until it is complete, then read it and pass it on.
    fn feed_chunk_size<'a>(
        &mut self,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        let (rest, complete) = self.hold_until(input, b"\r\n");
        if !complete {
            if self.held.len() > 1024 {
                return Err("a chunk-size line longer than 1 KiB".into());
            }
            return Ok(rest);
        }
        let line = std::mem::take(&mut self.held);
        let size = chunk_size(&line)?;
        out.extend_from_slice(&line);
        self.at = if size == 0 {
            At::Trailers
        } else {
            At::ChunkData(size)
        };
        Ok(rest)
    }

    /// The CRLF after a chunk's data, one byte at a time: `seen` of it seen already.
    fn feed_chunk_end<'a>(
        &mut self,
        seen: u8,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        let expected = b"\r\n"[seen as usize];
        if input[0] != expected {
            return Err("a chunk's data did not end where its size said".into());
        }
        out.push(input[0]);
        self.at = if seen == 1 {
            At::ChunkSize
        } else {
            At::ChunkEnd(1)
        };
        Ok(&input[1..])
    }

    /// Hold the trailer section (trailer lines, then an empty line: at once when there are none)
    /// until it is complete, then check it and pass it on.
    fn feed_trailers<'a>(
        &mut self,
        input: &'a [u8],
        out: &mut Vec<u8>,
    ) -> Result<&'a [u8], Refusal> {
        let (rest, complete) = self.hold_until(input, b"\r\n");
        if complete && (self.held == b"\r\n" || self.held.ends_with(b"\r\n\r\n")) {
            let trailers = std::mem::take(&mut self.held);
            if trailers.len() > 2 {
                strict_lines(&trailers[..trailers.len() - 4])?;
            }
            out.extend_from_slice(&trailers);
            self.at = self.after_request();
        } else if self.held.len() > MAX_HEAD {
            return Err("a trailer section longer than 64 KiB".into());
        }
        Ok(rest)
    }

    /// Move bytes of `input` into `held` until it ends at the first `end`: the rest of the
    /// input, and whether it does.
    fn hold_until<'a>(&mut self, input: &'a [u8], end: &[u8]) -> (&'a [u8], bool) {
        let (taken, complete) = take_until(&self.held, input, end);
        self.held.extend_from_slice(&input[..taken]);
        (&input[taken..], complete)
    }

    fn after_request(&mut self) -> At {
        if std::mem::take(&mut self.upgrade) {
            At::AfterUpgrade
        } else {
            At::Head
        }
    }

    /// Check a complete head (ending in CRLF CRLF) and say what follows it.
    fn check_head(&mut self, head: &[u8]) -> Result<At, Refusal> {
        let head = parse_head(head)?;
        if head.method == "CONNECT" {
            // A tunnel through the server to anywhere; airlock's own proxy takes CONNECT itself.
            return Err("CONNECT to a server behind an allowed name".into());
        }
        match &head.host {
            Some(host) if *host == self.host => {}
            other => {
                return Err(Refusal::OtherHost(format!(
                    "connected to {} but a later request asked for {}: refused (domain fronting)",
                    self.host,
                    other.as_deref().unwrap_or("no host")
                )))
            }
        }
        self.requests += 1;
        if head.upgrade && self.requests > 1 {
            // Whether the server switched is told by its first answer only.
            return Err("an Upgrade after other requests on the connection".into());
        }
        self.upgrade = head.upgrade;
        let quiet = matches!(head.method.as_str(), "GET" | "HEAD");
        Ok(match head.body {
            Body::Chunked => At::ChunkSize,
            Body::Length(length) if length > 0 && quiet => At::QuietBody(
                length,
                QuietBody {
                    started: false,
                    version_seen: 0,
                },
            ),
            Body::Length(length) if length > 0 => At::Body(length),
            Body::Length(_) => self.after_request(),
        })
    }
}

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    Length(u64),
    Chunked,
}

/// A request head, read as strictly as the strictest server would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The host the request is for (lower case, no trailing dot), from an absolute-form or
    /// CONNECT target or the Host header; None when it names none (HTTP/1.0 without Host).
    pub host: Option<String>,
    /// The port the request names: its absolute-form or CONNECT target's, else its Host's.
    pub port: Option<u16>,
    pub body: Body,
    /// It asks to switch protocols (Upgrade).
    pub upgrade: bool,
}

/// A token character (RFC 9110 5.6.2).
pub(crate) fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `host[:port]` of an authority: no userinfo, a numeric port, an IPv6 literal in brackets.
fn authority(text: &str) -> Result<(String, Option<u16>), String> {
    let bad = || format!("an authority the gate does not read: {text:?}");
    if text.is_empty() || text.contains(['@', '%', '\\']) {
        return Err(bad());
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad());
        }
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        None => None,
        Some(port)
            if !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(port.parse::<u16>().map_err(|_| bad())?)
        }
        Some(_) => return Err(bad()),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    {
        return Err(bad());
    }
    Ok((host, port))
}

/// Read a complete request head (from its request line to the blank line that ends it).
pub fn parse_head(head: &[u8]) -> Result<Head, String> {
    let lines = head
        .strip_suffix(b"\r\n\r\n")
        .ok_or("a request head that does not end with a blank line")?;
    strict_lines(lines)?;
    let mut lines = lines
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let RequestLine {
        method,
        target,
        http10,
    } = request_line(lines.next().unwrap_or_default())?;
    let headers = Headers::read(lines, http10)?;
    let body = body_framing(&method, &headers)?;
    let (host, port) = target_host(&method, &target, headers.host, http10)?;
    Ok(Head {
        method,
        host,
        port,
        body,
        upgrade: headers.upgrade,
    })
}

/// A request line's parts, checked.
struct RequestLine {
    method: String,
    target: String,
    /// The version is HTTP/1.0 (else HTTP/1.1).
    http10: bool,
}

/// Read `METHOD TARGET VERSION`, one space apart: a token, printable ASCII, HTTP/1.1 or 1.0.
fn request_line(request: &[u8]) -> Result<RequestLine, String> {
    let parts: Vec<&[u8]> = request.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err("a request line that is not METHOD TARGET VERSION, one space apart".into());
    };
    if method.is_empty() || !method.iter().all(|&b| tchar(b)) {
        return Err("a method that is not a token".into());
    }
    if target.is_empty() || !target.iter().all(|b| b.is_ascii_graphic()) {
        return Err("a request target with spaces or control bytes".into());
    }
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        _ => return Err("a version other than HTTP/1.1 or HTTP/1.0".into()),
    };
    // Both are ASCII (checked above).
    Ok(RequestLine {
        method: String::from_utf8_lossy(method).into_owned(),
        target: String::from_utf8_lossy(target).into_owned(),
        http10,
    })
}

/// What a head's header lines say about where the request goes and how its body is framed.
#[derive(Default)]
struct Headers {
    /// The Host header's authority.
    host: Option<(String, Option<u16>)>,
    content_length: Option<u64>,
    /// Transfer-Encoding: chunked.
    chunked: bool,
    /// An Upgrade header (other than to h2c, which is refused).
    upgrade: bool,
}

impl Headers {
    /// Read the header lines (each without its CRLF), in order.
    fn read<'a>(lines: impl Iterator<Item = &'a [u8]>, http10: bool) -> Result<Headers, String> {
        let mut headers = Headers::default();
        for line in lines {
            let (name, value) = header_fields(line)?;
            let value = String::from_utf8_lossy(value);
            let value = value.trim_matches([' ', '\t']);
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            headers.take(&name, value, http10)?;
        }
        Ok(headers)
    }

    /// Take one header (its name in lower case, its value trimmed); the others are not read.
    fn take(&mut self, name: &str, value: &str, http10: bool) -> Result<(), String> {
        match name {
            "host" => {
                if self.host.is_some() {
                    return Err("two Host headers".into());
                }
                self.host = Some(authority(value)?);
            }
            "content-length" => {
                let length = content_length(value)?;
                if self.content_length.is_some_and(|seen| seen != length) {
                    return Err("two different Content-Lengths".into());
                }
                self.content_length = Some(length);
            }
            "transfer-encoding" => {
                if !value.eq_ignore_ascii_case("chunked") || self.chunked || http10 {
                    return Err(format!(
                        "a transfer coding the gate cannot follow: {value:?}"
                    ));
                }
                self.chunked = true;
            }
            "upgrade" => {
                // HTTP/2 in plain text names its host in frames the gate does not read, as with
                // a prior-knowledge h2c connection (refused too).
                if value
                    .split(',')
                    .any(|protocol| protocol.trim().eq_ignore_ascii_case("h2c"))
                {
                    return Err(
                        "an upgrade to plain-text HTTP/2 (h2c), whose requests name their host where the gate does not read"
                            .into(),
                    );
                }
                self.upgrade = true;
            }
            _ => {}
        }
        Ok(())
    }
}

/// A header line's name and value (untrimmed): a token, a colon at once, no control bytes.
fn header_fields(line: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or("a header line without a colon")?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| tchar(b)) {
        return Err(format!(
            "a header name that is not a token: {:?}",
            String::from_utf8_lossy(name)
        ));
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a control byte in a header value".into());
    }
    Ok((name, value))
}

/// A Content-Length's value: digits only (no sign, no spaces, no list), that fit in 64 bits.
fn content_length(value: &str) -> Result<u64, String> {
    (!value.is_empty() && value.len() <= 19 && value.bytes().all(|b| b.is_ascii_digit()))
        .then(|| value.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| format!("a Content-Length that is not a number: {value:?}"))
}

/// How the body is framed, where every server agrees on it.
fn body_framing(method: &str, headers: &Headers) -> Result<Body, String> {
    let body = match (headers.content_length, headers.chunked) {
        (Some(_), true) => {
            return Err("both Content-Length and Transfer-Encoding (request smuggling)".into())
        }
        (_, true) => Body::Chunked,
        (length, false) => Body::Length(length.unwrap_or(0)),
    };
    if matches!(method, "GET" | "HEAD") && body == Body::Chunked {
        // Some servers ignore such a body and read it as the next request; one of known length
        // is checked for that as it passes (see `QuietBody`), a chunked one is refused.
        return Err(format!("a {method} request with a chunked body"));
    }
    Ok(body)
}

/// The host and port the request is for, from its target or its Host header, where every
/// server agrees on it.
fn target_host(
    method: &str,
    target: &str,
    host_header: Option<(String, Option<u16>)>,
    http10: bool,
) -> Result<(Option<String>, Option<u16>), String> {
    if method == "CONNECT" {
        let (host, port) = authority(target)?;
        // A tunnel goes to its target; a server that routes by Host would take it elsewhere.
        if let Some((header, _)) = &host_header {
            if *header != host {
                return Err(format!(
                    "a CONNECT to {host} whose Host says {header}: servers differ on which counts"
                ));
            }
        }
        Ok((Some(host), port))
    } else if target.starts_with('/') || (target == "*" && method == "OPTIONS") {
        match host_header {
            Some((host, port)) => Ok((Some(host), port)),
            None if http10 => Ok((None, None)),
            None => Err("an HTTP/1.1 request without a Host".into()),
        }
    } else {
        absolute_form_host(target, host_header)
    }
}

/// The host and port of an absolute-form target (`http://host:port/path`). Servers take the host
/// from the target, some frameworks from Host: the two must agree.
fn absolute_form_host(
    target: &str,
    host_header: Option<(String, Option<u16>)>,
) -> Result<(Option<String>, Option<u16>), String> {
    let (scheme, rest) = target
        .split_once("://")
        .ok_or("a request target that is neither a path nor a URL")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!("a request for a {scheme}:// URL"));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (host, port) = authority(&rest[..end])?;
    if let Some((header, _)) = &host_header {
        if *header != host {
            return Err(format!(
                "a request for {host} whose Host says {header}: servers differ on which counts"
            ));
        }
    }
    Ok((Some(host), port))
}

/// Pass on what `input` holds of the `left` bytes still due: the rest of the input, and how many
/// are still due then.
fn pass_on<'a>(left: u64, input: &'a [u8], out: &mut Vec<u8>) -> (&'a [u8], u64) {
    let n = (left.min(input.len() as u64)) as usize;
    out.extend_from_slice(&input[..n]);
    (&input[n..], left - n as u64)
}

/// How many bytes of `input` to take so that `held` + them ends at the first `end`, and whether
/// it does.
fn take_until(held: &[u8], input: &[u8], end: &[u8]) -> (usize, bool) {
    // The end may straddle what is held and the new input.
    let overlap = held.len().min(end.len() - 1);
    let mut joined = held[held.len() - overlap..].to_vec();
    joined.extend_from_slice(input);
    match joined.windows(end.len()).position(|w| w == end) {
        Some(at) => (at + end.len() - overlap, true),
        None => (input.len(), false),
    }
}

/// Lines of a head or trailer section (without the final blank line): CRLF only, no folding.
fn strict_lines(lines: &[u8]) -> Result<(), String> {
    for (i, &b) in lines.iter().enumerate() {
        let crlf = match b {
            b'\r' => lines.get(i + 1) == Some(&b'\n'),
            b'\n' => i > 0 && lines[i - 1] == b'\r',
            _ => true,
        };
        if !crlf {
            return Err("a bare CR or LF in a request head".into());
        }
        if b == b'\n' && matches!(lines.get(i + 1), Some(b' ' | b'\t')) {
            return Err("a folded header line".into());
        }
    }
    Ok(())
}

/// The size on a chunk-size line (`1a;ext=x\r\n`).
fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let line = &line[..line.len() - 2];
    // A bare LF ends the line for some servers and not for others (CVE-2025-22871).
    if line.iter().any(|&b| (b < 0x20 && b != b'\t') || b >= 0x7f) {
        return Err("a control or non-ASCII byte on a chunk-size line".into());
    }
    let text = std::str::from_utf8(line).unwrap_or("");
    let hex = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim_end_matches([' ', '\t']);
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("a chunk size that is not a hex number: {text:?}"));
    }
    // Past 32 bits some servers truncate the size: the gate and they would disagree.
    u64::from_str_radix(hex, 16)
        .ok()
        .filter(|&size| size <= u64::from(u32::MAX))
        .ok_or_else(|| format!("a chunk size past 4 GiB: {text:?}"))
}

#[cfg(test)]
mod tests;
