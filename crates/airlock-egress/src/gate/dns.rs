//! Answering the sandbox's DNS queries, over UDP and TCP: an allowed name gets the synthetic
//! addresses that stand for it (once the host could resolve it), any other NXDOMAIN at once —
//! "no such name" is final, where a resolver that gets no answer or an error retries and tools
//! take it as a temporary failure and try again for seconds. Nothing is forwarded.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd as _;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use super::{cut_decision, deny, lookup, NetEvent, NetEventKind, Slot, State};
use crate::dns::{self, Query};
use crate::rules::Decision;

/// Host lookups for DNS queries at once, at most; past that, queries are answered without one
/// (their connect then looks the name up).
const MAX_LOOKUPS_RUNNING: usize = 64;

pub(super) fn serve(socket: UdpSocket, state: Arc<State>) {
    let socket = Arc::new(socket);
    let mut buf = [0u8; 1500];
    loop {
        // Waited for, then counted, then taken: a query is always in the socket or counted
        // while its event is not written (see State::answering).
        let mut ready = [nix::poll::PollFd::new(
            socket.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut ready, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
        let _answering = Slot::counted(&state.answering);
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            return;
        };
        serve_one(&socket, &state, &buf[..len], from);
    }
}

/// Answer one datagram of the sandbox's (a lookup of the host's on a thread of its own).
fn serve_one(socket: &Arc<UdpSocket>, state: &Arc<State>, datagram: &[u8], from: SocketAddr) {
    let Some(query) = dns::parse_query(datagram) else {
        return;
    };
    let decision = decide(state, &query);
    // An allowed name the user did not --resolve is looked up on the host before it is
    // answered, on a thread of its own: the program's resolver waits, not its connect.
    let lookup = needs_host_lookup(state, &query, &decision)
        .then(|| Slot::take(&state.lookups_running, MAX_LOOKUPS_RUNNING))
        .flatten();
    if let Some(lookup) = lookup {
        let (socket, state) = (socket.clone(), state.clone());
        std::thread::spawn(move || {
            let decision = look_up(&state, &query, decision);
            let reply = answer(&state, &query, &decision);
            // Counted until its event is written (see State::answering).
            drop(lookup);
            let _ = socket.send_to(&reply, from);
        });
    } else {
        let _ = socket.send_to(&answer(state, &query, &decision), from);
    }
}

/// DNS over TCP (RFC 7766: each message after its two-byte length), which resolvers use when
/// told to (`options use-vc`, `dig +tcp`) or when an answer was truncated: each connection on
/// a thread of its own, at most [`MAX_TCP_CONNECTIONS`] at once, each query answered as over
/// UDP.
pub(super) fn serve_tcp(listener: &TcpListener, state: &Arc<State>) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let mut ready = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut ready, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
        // Counted from before it is taken until its thread is done with it.
        let answering = Slot::counted(&state.answering);
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let Some(place) = Slot::take(&open, MAX_TCP_CONNECTIONS) else {
            continue; // dropped: closed at once
        };
        let state = state.clone();
        std::thread::spawn(move || {
            let _ = answer_tcp(stream, &state);
            drop((place, answering));
        });
    }
}

/// DNS over TCP connections served at once, at most; past that a connection is closed.
const MAX_TCP_CONNECTIONS: usize = 16;

/// How long a DNS-over-TCP connection may last: a resolver asks its question or two at once; a
/// connection sending a byte now and then would hold its place for good.
const TCP_CONNECTION: Duration = Duration::from_secs(10);

/// Answer the queries of one DNS-over-TCP connection until it closes, runs out of its time or
/// sends what is not a query.
fn answer_tcp(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + TCP_CONNECTION;
    loop {
        let mut length = [0u8; 2];
        read_by(&mut stream, &mut length, deadline)?;
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
        read_by(&mut stream, &mut message, deadline)?;
        let Some(query) = dns::parse_query(&message) else {
            return Ok(());
        };
        let mut decision = decide(state, &query);
        if needs_host_lookup(state, &query, &decision) {
            decision = look_up(state, &query, decision);
        }
        let reply = answer(state, &query, &decision);
        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        stream.set_write_timeout(Some(left(deadline)?))?;
        stream.write_all(&framed)?;
    }
}

/// Fill `buf` from `stream` by `deadline` (each read waits for what is left of the time).
fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: std::time::Instant,
) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        stream.set_read_timeout(Some(left(deadline)?))?;
        match stream.read(&mut buf[filled..])? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => filled += n,
        }
    }
    Ok(())
}

/// The time left until `deadline`; an error once it has passed.
fn left(deadline: std::time::Instant) -> std::io::Result<Duration> {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    Ok(left)
}

/// What the profile says of a query's name (everything is refused once the network is cut, and
/// what is not a host name is never looked up: `*.example.com` or `0.0.0.0/0` would read as a
/// wildcard or a network wherever the name is shown or learned).
fn decide(state: &State, query: &Query) -> Decision {
    if state.is_cut() {
        cut_decision()
    } else if !crate::rules::is_host_name(&query.name) {
        deny("not a host name")
    } else {
        state.rules().may_resolve(&query.name)
    }
}

/// An allowed address query for a name the user did not `--resolve` is answered once the host
/// could resolve the name.
fn needs_host_lookup(state: &State, query: &Query, decision: &Decision) -> bool {
    // A name only `ask` names is looked up when the program connects, not when it asks for
    // it: a query alone sends nothing out of the host.
    decision.allowed
        && !airlock_rules::Ask::rule_asks(&decision.rule)
        && matches!(query.qtype, dns::TYPE_A | dns::TYPE_AAAA)
        && !lookup::overridden(state, &query.name)
}

/// `decision`, unless the host cannot resolve the name.
fn look_up(state: &State, query: &Query, decision: Decision) -> Decision {
    match state.lookups.get(&query.name) {
        Ok(_) => decision,
        Err(e) => deny(format!("the host cannot resolve {}: {e}", query.name)),
    }
}

/// The answer to one DNS query as `decision` says; the query is logged.
fn answer(state: &State, query: &Query, decision: &Decision) -> Vec<u8> {
    let reply = if decision.allowed {
        let addrs = state
            .synthetic
            .lock()
            .ok()
            .and_then(|mut s| s.addresses(&query.name));
        match addrs {
            Some(addrs) => dns::answer(query, &addrs, 5),
            None => dns::nxdomain(query),
        }
    } else {
        dns::nxdomain(query)
    };
    // One event per name and type asked, allowed or not.
    let mut e =
        NetEvent::new(NetEventKind::Dns, decision).about(Some(query.name.clone()), None, None);
    e.protocol = "dns";
    e.qtype = Some(dns::type_name(query.qtype));
    state.log(&e);
    reply
}
