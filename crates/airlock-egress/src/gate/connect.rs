//! The sandbox's connects, held by seccomp until the gate answers: read, decided, and then
//! refused, let through (inside the sandbox) or handed to the relay.
//!
//! The decision itself, [`decide`], is over plain data (where the connect goes, the socket's
//! type, the name the address stands for), and the connect is answered through [`Held`], so
//! that both are tested without a sandbox.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use airlock_jail::gate::{socket_info, Connection, Memory, Notification, Notifier};

use super::handover::hand_over;
use super::relay::Target;
use super::upstream::{self, Early};
use super::{deny, lookup, NetEvent, NetEventKind, Rules, Slot, State, PROXY};
use crate::rules::Egress;

/// How long a non-blocking connect waits for the destination before it goes on (the program's
/// event loop waits meanwhile): enough for a nearby host's refusal to come back as one.
const NONBLOCKING_WAIT: Duration = Duration::from_millis(100);
/// How long a blocking connect waits for the destination (each of its addresses has 10 s).
const BLOCKING_WAIT: Duration = Duration::from_secs(60);

/// What the gate needs to know of the socket a connect is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Socket {
    /// A TCP socket (`SOCK_STREAM`); anything else is taken for UDP.
    pub(super) stream: bool,
    /// Its connect returns at once (an event loop's socket).
    pub(super) nonblocking: bool,
    /// Connected or connecting already (a stream socket).
    pub(super) connection: Connection,
}

/// A connect the sandbox waits in, as the gate answers it: the seam between the gate's
/// decisions and the kernel. The kernel's is [`Call`]; the tests hold fake ones.
pub(super) trait Held {
    /// The socket the connect is on. An IPv6 socket that may not reach IPv4-mapped addresses
    /// is let to when `dest` is IPv6: the relay it is sent to is one.
    fn socket(&self, dest: SocketAddr) -> io::Result<Socket>;
    /// The length of the address the program passed (connect's third argument).
    fn addr_len(&self) -> usize;
    /// Connect the program's socket to `relay` for it and answer its connect with the result
    /// (0, EINPROGRESS for a non-blocking socket, or the error): its memory is left as it was.
    fn connect_to(&self, relay: SocketAddr) -> io::Result<()>;
    /// Let the kernel run the connect (at the address it now holds).
    fn pass(&self) -> io::Result<()>;
    /// The connect fails with `errno`.
    fn fail(&self, errno: i32) -> io::Result<()>;
    /// The name of the program that connects (see [`NetEvent::program`]).
    fn program(&self) -> Option<String>;
}

/// A connect the sandbox waits in: the notification, the listener that answers it, and the
/// socket it connects.
struct Call<'a> {
    notifier: &'a Notifier,
    n: &'a Notification,
    /// A copy of the connecting socket, once [`Held::socket`] has looked at it.
    socket: std::cell::OnceCell<airlock_jail::gate::SocketInfo>,
}

impl Held for Call<'_> {
    fn socket(&self, dest: SocketAddr) -> io::Result<Socket> {
        let socket = socket_info(self.n.pid, self.n.args[0])?;
        // The thread may have gone and its id been reused by another process between the
        // notification and the copy: the copy is the sandbox's only while it still waits.
        if !self.notifier.still_waiting(self.n.id) {
            return Err(io::Error::other("the connecting thread is gone"));
        }
        if socket.v6_only && dest.is_ipv6() {
            // The relay's address is IPv4-mapped for an IPv6 socket; without this its connect
            // would fail where a direct one succeeds. If the socket is bound already, the kernel
            // refuses, and the connect fails as before.
            let _ = socket.allow_ipv4_mapped();
        }
        let seen = Socket {
            stream: socket.kind == libc::SOCK_STREAM,
            nonblocking: socket.nonblocking,
            connection: socket.connection,
        };
        let _ = self.socket.set(socket);
        Ok(seen)
    }

    fn addr_len(&self) -> usize {
        self.n.args[2] as usize
    }

    fn connect_to(&self, relay: SocketAddr) -> io::Result<()> {
        let Some(socket) = self.socket.get() else {
            return Err(io::Error::other("the socket was not looked at"));
        };
        // A connect the program gave up meanwhile (a signal) is not made for it.
        if !self.notifier.still_waiting(self.n.id) {
            return Ok(());
        }
        let answered = match socket.connect(relay) {
            Ok(()) => self.notifier.succeed(self.n.id, 0),
            // A blocking socket still connecting after the gate's short wait: the program's own
            // connect waits for it, in its own thread, as long as it would (the kernel takes
            // no address from the connect of a socket that is connecting).
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) && !socket.nonblocking => {
                self.notifier.pass(self.n.id)
            }
            Err(e) => self
                .notifier
                .fail(self.n.id, e.raw_os_error().unwrap_or(libc::ECONNREFUSED)),
        };
        given_up_is_answered(answered)
    }

    fn pass(&self) -> io::Result<()> {
        given_up_is_answered(self.notifier.pass(self.n.id))
    }

    fn fail(&self, errno: i32) -> io::Result<()> {
        given_up_is_answered(self.notifier.fail(self.n.id, errno))
    }

    fn program(&self) -> Option<String> {
        let comm = std::fs::read(format!("/proc/{}/comm", self.n.pid)).ok()?;
        program_name(&comm)
    }
}

/// What the gate decides a connect on.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    pub(super) dest: SocketAddr,
    /// A TCP socket (`SOCK_STREAM`); anything else is taken for UDP.
    pub(super) stream: bool,
    /// The name `dest` stands for, when it is one of the gate's synthetic addresses.
    pub(super) name: Option<String>,
}

/// What becomes of a connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    /// It fails with this errno.
    Refuse(i32),
    /// It goes to the relay, for this target.
    Relay(Target),
    /// It goes to the relay for this target if a person says so (the profile's `ask` names
    /// it: this entry); refused otherwise.
    Ask(Target, String),
    /// A name only `ask` covers: a person is asked first (this entry), and only then is it looked
    /// up on the host, its address decided as [`Rules::after_approval`] says.
    AskFirst(String, String),
}

/// `relay`: the relay's port; None for a gate that relays nothing (network = "none").
pub(super) fn serve(notifier: Notifier, state: Arc<State>, relay: Option<u16>) {
    use std::sync::atomic::AtomicUsize;
    let notifier = Arc::new(notifier);
    // Connects being answered, on threads of their own (see MAX_CONNECTS_ANSWERING).
    let answering = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok(n) = notifier.recv() else {
            return; // no process of the sandbox is left
        };
        // Connects that stay inside (unix sockets, the sandbox's own loopback) are let through
        // here at once: no thread for them.
        let dest = match read_connect(&notifier, &n) {
            Ok(Some(outside)) => outside,
            Ok(None) => {
                if notifier.pass(n.id).is_err() {
                    let _ = notifier.fail(n.id, libc::ECONNREFUSED);
                }
                continue;
            }
            Err(err) => {
                refuse_unread(&notifier, &state, &n, &err);
                continue;
            }
        };
        // The others each on its own thread: resolving a name on the host may take a while, and
        // the other connects of the sandbox must not wait for it. (Each waiting connect is a
        // thread of the sandbox, so their number is bounded by its process limit; a thread
        // the sandbox gave up on ends within the host lookup's and the gate's own connect's
        // bounds.) Counted until its event is written (see State::answering).
        // A refusing gate's connects are counted in what the end of the run waits for (a
        // relaying gate's run waits for its sandbox to be gone instead: its connects may wait
        // on a destination for long).
        let Some(place) = Slot::take(&answering, MAX_CONNECTS_ANSWERING) else {
            let _ = notifier.fail(n.id, libc::EAGAIN);
            continue;
        };
        let counted = relay.is_none().then(|| Slot::counted(&state.answering));
        let (notifier, state) = (notifier.clone(), state.clone());
        std::thread::spawn(move || {
            let call = Call {
                notifier: &notifier,
                n: &n,
                socket: std::cell::OnceCell::new(),
            };
            if let Err(err) = handle(&call, &state, relay, dest) {
                refuse_unread(&notifier, &state, &n, &err);
            }
            drop((place, counted));
        });
    }
}

/// The process went away meanwhile, or its memory or the answer failed: refuse, if it waits;
/// the attempt is an event all the same.
fn refuse_unread(notifier: &Notifier, state: &State, n: &Notification, err: &io::Error) {
    let decision = deny(format!(
        "the gate could not read or answer this connect: {err}"
    ));
    state.log(&NetEvent::new(NetEventKind::Connect, &decision));
    let _ = notifier.fail(n.id, libc::ECONNREFUSED);
}

/// The address notification `n` connects to (read from its memory), when that is an IPv4 or
/// IPv6 address outside the sandbox; None when the kernel may run the connect as it is (another
/// family — the namespace and Landlock decide, as without a gate — or the sandbox's own
/// loopback).
fn read_connect(notifier: &Notifier, n: &Notification) -> io::Result<Option<SocketAddr>> {
    if i64::from(n.nr) != libc::SYS_connect {
        return Ok(None);
    }
    let memory = Memory::open(notifier, n)?;
    let raw = memory.read(n.args[1], (n.args[2] as usize).min(128))?;
    Ok(parse_sockaddr(&raw).filter(|dest| !inside_the_sandbox(dest.ip())))
}

/// The address and port in a sockaddr the sandbox passed to connect; None for other families.
fn parse_sockaddr(raw: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]);
    let port = u16::from_be_bytes([*raw.get(2)?, *raw.get(3)?]);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = raw.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port))
        }
        _ => None,
    }
}

/// An answer to a connect the program gave up meanwhile (a signal took it out of its call: the
/// kernel says ENOENT) needs none: nothing was refused.
fn given_up_is_answered(answered: io::Result<()>) -> io::Result<()> {
    match answered {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// The most connects the gate answers at once (each on a thread of the supervisor's); past it
/// a connect fails with EAGAIN at once. A program can keep the gate's own connect of its socket
/// waiting (a handshake it makes hang, racing the gate's bound on it), so the bound on threads
/// must not depend on anything the program can change.
const MAX_CONNECTS_ANSWERING: usize = 256;

/// A process's `comm` as a name to show: the sandbox chose it, so what is not printable ASCII
/// is dropped (it ends up in comments of a learned profile and in the audit log).
fn program_name(comm: &[u8]) -> Option<String> {
    let name: String = comm
        .iter()
        .map(|&b| char::from(b))
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect::<String>()
        .trim()
        .to_string();
    (!name.is_empty()).then_some(name)
}

/// The sandbox's own loopback (and "any"): connecting there stays inside it.
fn inside_the_sandbox(ip: IpAddr) -> bool {
    let ip = crate::ip::canonical(ip);
    ip.is_loopback() || ip.is_unspecified()
}

/// Answer one connect to `dest`, outside the sandbox.
fn handle(
    call: &impl Held,
    state: &Arc<State>,
    relay: Option<u16>,
    dest: SocketAddr,
) -> io::Result<()> {
    if state.is_cut() {
        return call.fail(libc::ENETUNREACH);
    }
    let socket = call.socket(dest)?;
    // On a socket connected or connecting already the kernel does not use the address: it
    // answers EISCONN or EALREADY (or 0, or waits, for a connect that went on meanwhile). Such
    // a connect is left to it, before anything is decided, connected or held, so that a loop of
    // them cannot open a connection to the destination each. Should the socket be disconnected
    // in between, the connect runs in the sandbox's own namespace, which reaches nothing.
    if socket.stream && socket.connection != Connection::None {
        return call.pass();
    }
    let attempt = Attempt {
        dest,
        stream: socket.stream,
        name: state
            .synthetic
            .lock()
            .ok()
            .and_then(|s| s.name_of(dest.ip()).map(str::to_string)),
    };
    let (answer, event) = decide(&attempt, state.rules(), |name, port| {
        lookup::resolve(state, name, port)
    });
    let program = call.program();
    // Held while a person decides; then logged with what they decided.
    let answer = match (answer, event) {
        (Answer::Ask(target, entry), Some(mut event)) => {
            let decision = state.approve(&super::Question {
                host: event.host().unwrap_or_default(),
                port: target.addr.port(),
                program: program.clone(),
                entry,
            });
            (event.allowed, event.rule) = (decision.allowed, decision.rule);
            event.program = program.clone();
            state.log(&event);
            match decision.allowed {
                true => Answer::Relay(target),
                false => Answer::Refuse(libc::ECONNREFUSED),
            }
        }
        (Answer::AskFirst(name, entry), Some(mut event)) => {
            let decision = state.approve(&super::Question {
                host: name.clone(),
                port: dest.port(),
                program: program.clone(),
                entry,
            });
            let (decision, addr) = match decision.allowed {
                true => state
                    .rules()
                    .after_approval(&name, dest.port(), decision, |name, port| {
                        lookup::resolve(state, name, port)
                    }),
                false => (decision, None),
            };
            (event.allowed, event.rule, event.ip) =
                (decision.allowed, decision.rule, addr.map(|a| a.ip()));
            event.program = program.clone();
            state.log(&event);
            match addr.filter(|_| event.allowed) {
                Some(addr) => Answer::Relay(Target {
                    name: Some(name),
                    addr,
                    proxy: false,
                    forwarded: false,
                    program: None,
                }),
                None => Answer::Refuse(libc::ECONNREFUSED),
            }
        }
        (answer, event) => {
            if let Some(mut event) = event {
                event.program = program.clone();
                state.log(&event);
            }
            answer
        }
    };
    let (answer, relay) = match (answer, relay) {
        (Answer::Refuse(errno), _) => return call.fail(errno),
        (Answer::Relay(target), Some(relay)) => (Target { program, ..target }, relay),
        // Nothing is relayed without a relay (decide never lets a connect through then).
        (Answer::Relay(_) | Answer::Ask(..) | Answer::AskFirst(..), None) => {
            return call.fail(libc::ENETUNREACH)
        }
        // Asked above.
        (Answer::Ask(..) | Answer::AskFirst(..), Some(_)) => return call.fail(libc::ECONNREFUSED),
    };
    match answer {
        // airlock's proxy: the request on the connection is decided, not the connection.
        target if target.proxy => hand_over(state, relay, call, dest, target, None),
        target if !under_bound(state, &target) => call.fail(libc::EAGAIN),
        target => match connect_early(state, &target, socket.nonblocking) {
            Ok(early) => hand_over(state, relay, call, dest, target, Some(early)),
            Err(errno) => call.fail(errno),
        },
    }
}

/// May one more connection to `target` be begun: fewer than the bound open or on their way to
/// the relay? Checked before the gate connects to the destination, so that connects the kernel
/// then fails (their entry waits in the pending table until it is stale) cannot pile up
/// connections there. A refusal is logged.
fn under_bound(state: &State, target: &Target) -> bool {
    if state.connections() < state.max_open {
        return true;
    }
    state.log(&target.event(NetEventKind::Connect, &state.too_many()));
    false
}

/// Decide a connect: what becomes of it, and the event to log (None: nothing to log).
/// `resolve` finds the host's address for a name (and whether it is the user's `--resolve`).
pub(super) fn decide(
    attempt: &Attempt,
    rules: Rules<'_>,
    resolve: impl FnOnce(&str, u16) -> io::Result<(SocketAddr, bool)>,
) -> (Answer, Option<NetEvent>) {
    let Attempt { dest, stream, name } = attempt;
    if rules.egress == &Egress::None {
        // No network: nothing leaves, not even to airlock's proxy; the kernel would answer
        // ENETUNREACH (tools take it as final, where ECONNREFUSED is retried).
        let decision = rules.decide(None, *dest, false);
        let mut e = NetEvent::new(NetEventKind::Connect, &decision).about(
            None,
            Some(dest.ip()),
            Some(dest.port()),
        );
        if !stream {
            e.protocol = "udp";
        }
        return (Answer::Refuse(libc::ENETUNREACH), Some(e));
    }
    if *stream && crate::ip::canonical(dest.ip()) == PROXY.ip() && dest.port() == PROXY.port() {
        let proxy = Target {
            name: None,
            addr: PROXY,
            proxy: true,
            forwarded: false,
            program: None,
        };
        return (Answer::Relay(proxy), None);
    }
    if !stream {
        if name.is_some() {
            // A resolver's probe: glibc connects a UDP socket to each address it got, to pick
            // the source address, and sends nothing. Nothing can leave over it anyway.
            return (Answer::Refuse(libc::ENETUNREACH), None);
        }
        let decision = deny("UDP leaves the sandbox only as DNS to its own resolver");
        let mut e = NetEvent::new(NetEventKind::Connect, &decision).about(
            None,
            Some(dest.ip()),
            Some(dest.port()),
        );
        e.protocol = "udp";
        return (Answer::Refuse(libc::ENETUNREACH), Some(e));
    }
    if let Some((name, entry)) = name
        .as_deref()
        .and_then(|name| Some((name, rules.asks_before_lookup(name)?)))
    {
        let decision = deny(format!("ask {entry}"));
        let e = NetEvent::new(NetEventKind::Connect, &decision).about(
            Some(name.to_string()),
            None,
            Some(dest.port()),
        );
        return (Answer::AskFirst(name.to_string(), entry), Some(e));
    }
    let (decision, target, trusted) = match name {
        Some(name) => match resolve(name, dest.port()) {
            Ok((addr, trusted)) => (rules.decide(Some(name), addr, trusted), Some(addr), trusted),
            Err(e) => (
                deny(format!("cannot resolve {name} on the host: {e}")),
                None,
                false,
            ),
        },
        None => (rules.decide(None, *dest, false), Some(*dest), false),
    };
    // Refused for want of an allow entry, and named by `ask`: a person decides.
    let asked = target
        .filter(|_| !decision.allowed)
        .and_then(|addr| Some((addr, rules.asks(name.as_deref(), addr, trusted)?)));
    let decision = match &asked {
        Some((_, entry)) => deny(format!("ask {entry}")),
        None => decision,
    };
    let e = NetEvent::new(NetEventKind::Connect, &decision).about(
        name.clone(),
        target.map(|t| t.ip()),
        Some(dest.port()),
    );
    let to = |addr| Target {
        name: name.clone(),
        addr,
        proxy: false,
        forwarded: false,
        program: None,
    };
    let answer = match (asked, target.filter(|_| decision.allowed)) {
        (Some((addr, entry)), _) => Answer::Ask(to(addr), entry),
        (None, Some(addr)) => Answer::Relay(to(addr)),
        (None, None) => Answer::Refuse(libc::ECONNREFUSED),
    };
    (answer, Some(e))
}

/// Connect to the destination while the sandbox's connect waits, so that a port that is not
/// there fails the connect as it would directly (ECONNREFUSED, ETIMEDOUT…) instead of a
/// connection that is then reset. A blocking connect waits for the answer; a non-blocking one
/// (an event loop's) at most [`NONBLOCKING_WAIT`], then goes on while the gate keeps
/// connecting for it. Err: the errno the connect fails with.
fn connect_early(state: &Arc<State>, target: &Target, nonblocking: bool) -> Result<Early, i32> {
    let (sender, connecting) = mpsc::channel();
    {
        let (state, name, addr) = (state.clone(), target.name.clone(), target.addr);
        std::thread::spawn(move || {
            let _ = sender.send(upstream::connect(&state, name.as_deref(), addr));
        });
    }
    let wait = if nonblocking {
        NONBLOCKING_WAIT
    } else {
        BLOCKING_WAIT
    };
    match connecting.recv_timeout(wait) {
        Ok(Ok(upstream)) => Ok(Early::Ready(upstream)),
        Ok(Err((_, errno))) => Err(errno),
        Err(_) => Ok(Early::Coming(connecting)),
    }
}

#[cfg(test)]
mod tests;
