//! The relay: the listener, in the sandbox's own namespace, that allowed connects are sent to.
//! Each connection it accepts is matched to the target its connect was decided for, reaches
//! that destination, has its first bytes judged ([`super::fronting`]) and is then copied both
//! ways ([`super::copy`]), or, when it is TLS to a name the injector holds a secret for,
//! served by the injector ([`crate::inject::Injector::serve`]).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::copy::Watch;
use super::fronting::{self, Verdict, FIRST_WORD};
use super::handover::{relay_id, Pending};
use super::upstream::{self, Early};
use super::{deny, proxy, NetEvent, NetEventKind, State};
use crate::http1::{FirstAnswer, Refusal, Requests};
use crate::rules::Decision;
use crate::sni::{self, Peek, MAX_PEEK};
use crate::tls::{ClientHellos, Handshake, ServerHello};

/// Where an accepted relay connection must go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) name: Option<String>,
    pub(super) addr: SocketAddr,
    /// A connection to airlock's proxy: its request says where it goes.
    pub(super) proxy: bool,
    /// A plain-HTTP request airlock's proxy forwards. A later request on the connection for
    /// another host is then the client reusing its proxy connection, not fronting: the
    /// connection is closed without a word, and the client's next one is decided afresh.
    pub(super) forwarded: bool,
    /// The program whose connect this is (see [`NetEvent::program`]).
    pub(super) program: Option<String>,
}

impl Target {
    /// An event of `kind` about this target.
    pub(super) fn event(&self, kind: NetEventKind, decision: &Decision) -> NetEvent {
        let mut e = NetEvent::new(kind, decision).about(
            self.name.clone(),
            Some(self.addr.ip()),
            Some(self.addr.port()),
        );
        e.program = self.program.clone();
        e
    }
}

pub(super) fn serve(listener: &TcpListener, state: &Arc<State>) {
    for client in listener.incoming() {
        let Ok(client) = client else {
            // Out of fds, say: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // The address the sandbox's socket was sent to names the target.
        let Some(id) = client.local_addr().ok().and_then(|a| relay_id(a.ip())) else {
            continue;
        };
        let Some(Pending { target, early, .. }) =
            state.pending.lock().ok().and_then(|mut p| p.remove(&id))
        else {
            continue; // not sent here by the gate (or already used): dropped
        };
        let state = state.clone();
        std::thread::spawn(move || relay(client, target, early, &state));
    }
}

/// A relay connection in `State::open` for as long as this lives.
pub(super) struct Listed<'a> {
    state: &'a State,
    id: u64,
}

/// Relayed connections one sandbox may have open at once; more are refused.
const MAX_OPEN: usize = 4096;

/// How many relayed connections may be open at once: [`MAX_OPEN`], or fewer when this process
/// may not open enough descriptors (each takes about four), after raising its soft limit to the
/// hard one.
pub(super) fn max_open() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 64;
    };
    let limit = if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let budget = usize::try_from(limit.saturating_sub(128) / 4).unwrap_or(MAX_OPEN);
    budget.clamp(16, MAX_OPEN)
}

impl<'a> Listed<'a> {
    fn new(state: &'a State, client: &TcpStream) -> Listed<'a> {
        let id = state.next_id.fetch_add(1, Ordering::SeqCst);
        if let (Ok(mut open), Ok(clone)) = (state.open.lock(), client.try_clone()) {
            open.insert(id, vec![clone]);
        }
        Listed { state, id }
    }

    /// The connection's other end (to the destination), closed with it: a silent server must
    /// not hold the relay, or the run's end, once the sandbox is gone.
    fn also(&self, upstream: &TcpStream) {
        if let (Ok(mut open), Ok(clone)) = (self.state.open.lock(), upstream.try_clone()) {
            if let Some(streams) = open.get_mut(&self.id) {
                streams.push(clone);
            }
        }
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        if let Ok(mut open) = self.state.open.lock() {
            open.remove(&self.id);
        }
    }
}

fn relay(client: TcpStream, target: Target, early: Option<Early>, state: &State) {
    // Listed while it is open, so that cutting the network, or the run's end, can close it.
    let listed = Listed::new(state, &client);
    if target.proxy {
        return proxy::serve(client, state, &listed, target.program);
    }
    relay_with(client, target, state, Vec::new(), early, &listed)
}

/// The first bytes a client sent, and whether it then closed its side.
pub(super) struct FirstBytes {
    pub(super) bytes: Vec<u8>,
    pub(super) closed: bool,
}

/// Read the first bytes (until they say what they are, the client closes its side, or 10 s
/// pass).
pub(super) fn first_bytes(client: &mut TcpStream) -> FirstBytes {
    let _ = client.set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut closed = false;
    while Instant::now() < deadline && buf.len() < MAX_PEEK {
        match client.read(&mut chunk) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if sni::peek(&buf) != Peek::NeedMore {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = client.set_read_timeout(None);
    FirstBytes { bytes: buf, closed }
}

/// Wait (at most [`FIRST_WORD`]) for whichever side speaks first, watching both all along (a
/// server may greet late): `true` when it is the server (SSH,
/// SMTP…: protocols that name no host), `false` when the client has bytes (or nobody spoke).
fn server_speaks_first(client: &TcpStream, upstream: &TcpStream) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [
        PollFd::new(client.as_fd(), PollFlags::POLLIN),
        PollFd::new(upstream.as_fd(), PollFlags::POLLIN),
    ];
    let window = u16::try_from(FIRST_WORD.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(window)) {
        Ok(n) if n > 0 => {
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            !ready(&fds[0]) && ready(&fds[1])
        }
        _ => false,
    }
}

/// Relay a connection to `target`. `first`: bytes already read from the client (a proxied
/// request); empty: read them here, once the client speaks.
pub(super) fn relay_with(
    mut client: TcpStream,
    target: Target,
    state: &State,
    mut first: Vec<u8>,
    early: Option<Early>,
    listed: &Listed,
) {
    let started = Instant::now();
    if !admit(state, &target) {
        return;
    }
    let Some(upstream) = reach(state, &target, early, &client) else {
        return;
    };
    listed.also(&upstream);
    // The relay passes on bytes as they come: how they were grouped into segments was the
    // sender's choice, already made. Nagle here would hold a message's tail until the last
    // segment is acknowledged, which a peer that delays its acknowledgements makes 40 ms.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    // Not HTTP or TLS when the server speaks first (their clients always do): no host to
    // check; the name and port decided.
    let server_first = first.is_empty() && server_speaks_first(&client, &upstream);
    let mut client_closed = false;
    if first.is_empty() && !server_first {
        let said = first_bytes(&mut client);
        if said.bytes.is_empty() && said.closed {
            // Connected and closed without a word (a port probe, a health check): nothing was
            // asked, nothing to refuse.
            return;
        }
        first = said.bytes;
        client_closed = said.closed;
    }
    let verdict = fronting::verdict(target.name.as_deref(), &first, client_closed, server_first);
    if let Some(rule) = &verdict.refusal {
        let mut e = target.event(NetEventKind::Fronting, &deny(rule.clone()));
        e.sni.clone_from(&verdict.asked);
        state.log(&e);
        return;
    }
    if unreadable(state, &target, &verdict) {
        return refuse_unread(client, &target, state, &verdict);
    }
    if let Some(injector) = intercepting(state, &target, &verdict) {
        let host = target.name.as_deref().unwrap_or_default();
        let port = target.addr.port();
        let served = injector.serve(client, upstream, first, host, port, &|e| state.log(e));
        return closed(
            &target,
            state,
            verdict.asked,
            served.bytes_out,
            served.bytes_in,
            started,
        );
    }
    pass_on(client, upstream, &target, state, &first, verdict, started);
}

/// The injector, when it serves this connection: a TLS hello (which named the host, as the
/// verdict checked) on a connection by a name it holds a secret for. Anything else is
/// relayed as it is.
fn intercepting<'s>(
    state: &'s State,
    target: &Target,
    verdict: &Verdict,
) -> Option<&'s crate::inject::Injector> {
    let injector = state.config.inject.as_deref()?;
    let name = target.name.as_deref()?;
    (matches!(verdict.peeked, Peek::Tls { .. }) && injector.intercepts(name)).then_some(injector)
}

/// A connection to a host with `[[network.http]]` rules that is not TLS (plain HTTP, another
/// protocol, TLS after a preamble): the injector cannot read its requests, so it cannot hold
/// them to the rules.
fn unreadable(state: &State, target: &Target, verdict: &Verdict) -> bool {
    let (Some(injector), Some(name)) = (state.config.inject.as_deref(), target.name.as_deref())
    else {
        return false;
    };
    injector.http_rules(name).is_some() && !matches!(verdict.peeked, Peek::Tls { .. })
}

/// Refuse a connection [`unreadable`] found: recorded, and a plain-HTTP client told why (403).
fn refuse_unread(mut client: TcpStream, target: &Target, state: &State, verdict: &Verdict) {
    let name = target.name.as_deref().unwrap_or_default();
    let decision = deny(format!(
        "a connection to {name}:{} that is not TLS: refused ([[network.http]] rules hold for HTTPS, whose requests the gate reads)",
        target.addr.port()
    ));
    if let Peek::Http { method, .. } = &verdict.peeked {
        let mut e = target.event(NetEventKind::Request, &decision);
        e.method = Some(method.clone());
        state.log(&e);
        return proxy::refuse(&mut client, "403 Forbidden", &decision);
    }
    state.log(&target.event(NetEventKind::Request, &decision));
}

/// May a connection to `target` be relayed at all: the network not cut, and not too many open?
fn admit(state: &State, target: &Target) -> bool {
    if state.is_cut() {
        return false;
    }
    if state.open.lock().map_or(0, |open| open.len()) > state.max_open {
        state.log(&target.event(NetEventKind::Connect, &state.too_many()));
        return false;
    }
    true
}

/// The connection to the destination: the one begun while the connect waited, or a new one.
fn reach(
    state: &State,
    target: &Target,
    early: Option<Early>,
    client: &TcpStream,
) -> Option<TcpStream> {
    let upstream = match early {
        Some(Early::Ready(upstream)) => Ok(upstream),
        Some(Early::Coming(connecting)) => connecting
            .recv()
            .unwrap_or_else(|_| Err(("the connect was abandoned".into(), libc::ECONNABORTED))),
        None => upstream::connect(state, target.name.as_deref(), target.addr),
    };
    if upstream.is_err() {
        // The program's connect went through already (to the relay): a reset, rather than an
        // orderly end, says that nothing was there.
        let reset = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        let _ = nix::sys::socket::setsockopt(client, nix::sys::socket::sockopt::Linger, &reset);
    }
    upstream.ok()
}

/// Pass an allowed connection on: its first bytes, then everything both ways; the last event
/// says how much went each way.
fn pass_on(
    client: TcpStream,
    mut upstream: TcpStream,
    target: &Target,
    state: &State,
    first: &[u8],
    verdict: Verdict,
    started: Instant,
) {
    let fronting =
        |refusal: Refusal| target.event(NetEventKind::Fronting, &deny(refusal.to_string()));
    // Plain HTTP: every request on the connection is checked, not just the first (a kept-alive
    // connection could carry the next one for another host).
    let first_answer = Arc::new(FirstAnswer::default());
    let mut watch = match (&verdict.peeked, &target.name) {
        (Peek::Http { .. }, Some(name)) => Watch::Http(Requests::new(name, first_answer.clone())),
        // TLS: every ClientHello, not just the first (a server that asks for a retry reads a
        // second one, and routes by it).
        (Peek::Tls { .. }, Some(name)) => {
            let handshake = Arc::new(Handshake::default());
            let hellos = ClientHellos::new(name, handshake.clone());
            Watch::Tls(hellos, ServerHello::new(handshake))
        }
        // PostgreSQL's SSLRequest: the handshake after it is followed as any.
        (Peek::PostgresTls, Some(name)) => {
            let handshake = Arc::new(Handshake::default());
            let preamble = crate::tls::POSTGRES_SSL_REQUEST.len();
            let hellos = ClientHellos::after(name, handshake.clone(), preamble);
            Watch::Tls(hellos, ServerHello::after_ssl_request(handshake))
        }
        _ => Watch::None,
    };
    let mut first_out = Vec::new();
    let judged = match &mut watch {
        Watch::Http(requests) => requests.feed(first, &mut first_out),
        Watch::Tls(hellos, _) => hellos.feed(first, &mut first_out),
        Watch::None => {
            first_out.extend_from_slice(first);
            Ok(())
        }
    };
    if let Err(refusal) = judged {
        return state.log(&fronting(refusal));
    }
    if upstream.write_all(&first_out).is_err() {
        return;
    }
    let Some(copied) = super::copy::both_ways(client, upstream, watch, &first_answer) else {
        return;
    };
    let bytes_out = match copied.out {
        Ok(n) => n,
        Err((n, refusal)) => {
            let reused = matches!(refusal, Refusal::OtherHost(_)) && target.forwarded;
            if !reused {
                state.log(&fronting(refusal));
            }
            n
        }
    } + first_out.len() as u64;
    let bytes_in = match copied.bytes_in {
        Ok(n) => n,
        Err((n, refusal)) => {
            state.log(&fronting(refusal));
            n
        }
    };
    closed(target, state, verdict.asked, bytes_out, bytes_in, started);
}

/// A connection's last event: how much went each way, for how long.
fn closed(
    target: &Target,
    state: &State,
    asked: Option<String>,
    bytes_out: u64,
    bytes_in: u64,
    started: Instant,
) {
    let decision = Decision {
        allowed: true,
        rule: "closed".into(),
    };
    let mut e = target.event(NetEventKind::Closed, &decision);
    e.sni = asked;
    (e.bytes_out, e.bytes_in, e.duration_ms) = (
        Some(bytes_out),
        Some(bytes_in),
        Some(started.elapsed().as_millis() as u64),
    );
    state.log(&e);
}

#[cfg(test)]
mod tests;
