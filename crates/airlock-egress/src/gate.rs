//! The supervisor's network gate for one sandbox.
//!
//! - **DNS**: the sandbox's resolver (127.0.0.53 in its own namespace) is answered here: a name
//!   the profile allows gets synthetic addresses that map back to the name; any other, NXDOMAIN.
//!   Nothing is forwarded.
//! - **connect**: every `connect` of the sandbox waits for this gate (seccomp user notification).
//!   Its own loopback passes. A TCP connection to a synthetic address is a connection to its name:
//!   the name is resolved here, on the host, once, and the address it got is checked (no
//!   private, loopback, metadata… unless named by address) and used. A connection to a bare
//!   address is checked as that address. When allowed, the sandbox's socket is replaced by one of
//!   ours, connected to this gate's relay; the connect returns at once. Refused: ECONNREFUSED.
//!   UDP to anything but its own loopback: ENETUNREACH.
//! - **relay**: before anything reaches the destination, the first bytes are read: a TLS
//!   ClientHello must name the same host (SNI), an HTTP request the same Host; otherwise the
//!   connection is closed (no domain fronting). Then bytes are copied both ways.
//!
//! Every attempt is an [`Event`] for the caller (the audit log, a notice on stderr).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs,
    UdpSocket,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use airlock_jail::gate::{socket_info, Memory, Notifier};

use crate::dns::{self, Synthetic};
use crate::rules::{Decision, Egress};
use crate::sni::{self, Peek, MAX_PEEK};

/// Where the sandbox finds airlock's HTTP proxy (set as HTTP_PROXY and friends): an address
/// of the synthetic range that no name is given, answered by this gate.
pub const PROXY_URL: &str = "http://198.19.255.254:3128";
const PROXY: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 19, 255, 254)), 3128);

/// One attempt, as the caller logs it.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// `dns`, `connect`, `fronting` or `closed`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub protocol: &'static str,
    pub allowed: bool,
    pub rule: String,
    /// What the first bytes named (TLS SNI or HTTP Host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// What the gate needs besides the sandbox.
pub struct Config {
    pub egress: Egress,
    /// Names resolved to these addresses instead of through the host's resolver; taken as the
    /// user's own word, so a loopback or private address given here is not refused.
    pub resolve: Vec<(String, IpAddr)>,
    pub on_event: Box<dyn Fn(&Event) + Send + Sync>,
    /// When this file appears, the network is cut: open connections are closed, new ones and
    /// DNS refused (`airlock kill --network`).
    pub cut_when: Option<std::path::PathBuf>,
}

/// The connection to the destination, begun while the sandbox's connect waited.
enum Early {
    /// Connected.
    Ready(TcpStream),
    /// Still connecting (the sandbox's connect went on without waiting longer).
    Coming(std::sync::mpsc::Receiver<Result<TcpStream, Unreached>>),
}

/// A destination that did not take the connection: why, and the errno the program would have
/// had connecting directly.
type Unreached = (String, i32);

/// How long a non-blocking connect waits for the destination before it goes on (the program's
/// event loop waits meanwhile): enough for a nearby host's refusal to come back as one.
const NONBLOCKING_WAIT: Duration = Duration::from_millis(100);

/// A connect sent on to the relay, not yet accepted there.
struct Pending {
    target: Target,
    since: Instant,
    early: Option<Early>,
}

/// Where an accepted relay connection must go.
#[derive(Debug, Clone)]
struct Target {
    name: Option<String>,
    addr: SocketAddr,
    /// A connection to airlock's proxy: its request says where it goes.
    proxy: bool,
    /// A plain-HTTP request airlock's proxy forwards. A later request on the connection for
    /// another host is then the client reusing its proxy connection, not fronting: the
    /// connection is closed without a word, and the client's next one is decided afresh.
    forwarded: bool,
}

struct State {
    config: Config,
    /// Set once the network is cut.
    cut: std::sync::atomic::AtomicBool,
    /// Open relay connections (a clone of the sandbox side), to close when the network is cut.
    open: Mutex<HashMap<u64, Vec<TcpStream>>>,
    next_id: std::sync::atomic::AtomicU64,
    synthetic: Mutex<Synthetic>,
    /// Connections the connect handler sent to the relay, by the id in the relay address they
    /// were sent to (127.64.0.0/10 + id), and when.
    pending: Mutex<HashMap<u32, Pending>>,
    /// At most this many relayed connections open at once (see [`max_open`]).
    max_open: usize,
    next_pending: std::sync::atomic::AtomicU32,
    /// See [`host_addresses`].
    host_addresses: Vec<IpAddr>,
    /// What the host's resolver said of each name lately (see [`HostLookups`]).
    lookups: HostLookups,
    /// Host lookups started for DNS queries and not yet answered (see [`serve_dns`]).
    lookups_running: Arc<std::sync::atomic::AtomicUsize>,
}

/// The host resolver's answers, kept for a short while: a name is looked up when the sandbox
/// asks the gate's DNS for it (the program's resolver waits then, off its event loop), and its
/// connects right after use that answer instead of waiting for another lookup while `connect`
/// is held. One lookup at a time per name; failures are kept for less long.
#[derive(Default)]
struct HostLookups(Mutex<HashMap<String, Arc<Mutex<Option<Looked>>>>>);

type Looked = (Result<Vec<IpAddr>, String>, Instant);

/// How long an answer of the host's resolver is used, found and not found.
const LOOKUP_KEPT: Duration = Duration::from_secs(30);
const LOOKUP_FAILURE_KEPT: Duration = Duration::from_secs(5);

impl HostLookups {
    fn get(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let slot = match self.0.lock() {
            Ok(mut names) => {
                if names.len() > 4096 {
                    // Bounded: a sandbox asking for many names of a wildcard keeps no more.
                    names.clear();
                }
                names.entry(name.to_string()).or_default().clone()
            }
            Err(_) => return look_up(name),
        };
        let Ok(mut slot) = slot.lock() else {
            return look_up(name);
        };
        if let Some((result, at)) = slot.as_ref() {
            let kept = if result.is_ok() {
                LOOKUP_KEPT
            } else {
                LOOKUP_FAILURE_KEPT
            };
            if at.elapsed() < kept {
                return result.clone();
            }
        }
        let result = look_up(name);
        *slot = Some((result.clone(), Instant::now()));
        result
    }
}

/// Ask the host's resolver. As given, not fully qualified: glibc finds a name with a trailing
/// dot in DNS but not in /etc/hosts. (A name that does not exist may then be tried under the
/// host's search domains; what that finds is checked like any address.)
fn look_up(name: &str) -> Result<Vec<IpAddr>, String> {
    let addrs: Vec<IpAddr> = (name, 0)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .map(|addr| addr.ip())
        .collect();
    if addrs.is_empty() {
        return Err("no address".into());
    }
    Ok(addrs)
}

/// A started gate, to be finished when the sandbox has ended.
pub struct Running(Arc<State>);

impl Running {
    /// The sandbox has ended: close what it left open and wait (at most `within`) until every
    /// connection's last event was delivered, so that none is lost when the caller exits.
    pub fn finish(&self, within: Duration) {
        if let Ok(open) = self.0.open.lock() {
            for stream in open.values().flatten() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        let deadline = Instant::now() + within;
        while Instant::now() < deadline && self.0.open.lock().is_ok_and(|open| !open.is_empty()) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Start the gate's threads; they end with the sandbox.
pub fn start(gate: airlock_jail::Gate, config: Config) -> io::Result<Running> {
    // The relay listens in the sandbox's own namespace (the setup process opened it there).
    let relay = TcpListener::from(gate.relay);
    let relay_port = relay.local_addr()?.port();
    let state = Arc::new(State {
        config,
        cut: std::sync::atomic::AtomicBool::new(false),
        open: Mutex::new(HashMap::new()),
        next_id: std::sync::atomic::AtomicU64::new(0),
        synthetic: Mutex::new(Synthetic::default()),
        pending: Mutex::new(HashMap::new()),
        next_pending: std::sync::atomic::AtomicU32::new(1),
        host_addresses: host_addresses()?,
        max_open: max_open(),
        lookups: HostLookups::default(),
        lookups_running: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    });
    let dns_socket = UdpSocket::from(gate.dns);
    let dns_state = state.clone();
    std::thread::spawn(move || serve_dns(dns_socket, dns_state));
    let relay_state = state.clone();
    std::thread::spawn(move || serve_relay(&relay, &relay_state));
    if let Some(flag) = state.config.cut_when.clone() {
        let watch_state = state.clone();
        std::thread::spawn(move || watch_cut(&flag, &watch_state));
    }
    let notifier = gate.notifier;
    let connects_state = state.clone();
    std::thread::spawn(move || serve_connects(notifier, connects_state, relay_port));
    Ok(Running(state))
}

/// Decide a connection to `addr`, reached by `name` (None: by bare address); `trusted` when the
/// user mapped the name to the address themselves (`--resolve`).
fn decide(state: &State, name: Option<&str>, addr: SocketAddr, trusted: bool) -> Decision {
    let egress = &state.config.egress;
    match name {
        Some(name) if trusted => egress.decide_trusted(name, addr.ip(), addr.port()),
        _ => egress.decide_on_host(name, addr.ip(), addr.port(), &state.host_addresses),
    }
}

/// The addresses of the host's own interfaces, which a sandbox may reach only when an allow
/// entry names them. Read once, when the gate starts.
fn host_addresses() -> io::Result<Vec<IpAddr>> {
    let interfaces = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(interfaces
        .filter_map(|interface| interface.address)
        .filter_map(|addr| {
            addr.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .map(crate::ip::canonical)
        .collect())
}

fn is_cut(state: &State) -> bool {
    state.cut.load(std::sync::atomic::Ordering::SeqCst)
}

/// Cut the network once `flag` exists: nothing new is let through, and what is open is closed.
fn watch_cut(flag: &std::path::Path, state: &State) {
    while !flag.exists() {
        std::thread::sleep(Duration::from_millis(50));
    }
    state.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Ok(open) = state.open.lock() {
        for stream in open.values().flatten() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
    let decision = Decision {
        allowed: false,
        rule: "the network was cut (airlock kill --network)".into(),
    };
    (state.config.on_event)(&event("cut", &decision));
}

fn cut_decision() -> Decision {
    Decision {
        allowed: false,
        rule: "the network was cut (airlock kill --network)".into(),
    }
}

fn event(kind: &'static str, decision: &Decision) -> Event {
    Event {
        kind,
        name: None,
        ip: None,
        port: None,
        protocol: "tcp",
        allowed: decision.allowed,
        rule: decision.rule.clone(),
        sni: None,
        bytes_out: None,
        bytes_in: None,
        duration_ms: None,
    }
}

/// Host lookups for DNS queries at once, at most; past that, queries are answered without one
/// (their connect then looks the name up).
const MAX_LOOKUPS_RUNNING: usize = 64;

fn serve_dns(socket: UdpSocket, state: Arc<State>) {
    let socket = Arc::new(socket);
    let mut buf = [0u8; 1500];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            return;
        };
        let Some(query) = dns::parse_query(&buf[..len]) else {
            continue;
        };
        let decision = if is_cut(&state) {
            cut_decision()
        } else {
            state.config.egress.may_resolve(&query.name)
        };
        // An allowed name the user did not --resolve is looked up on the host before it is
        // answered, on a thread of its own: the program's resolver waits, not its connect.
        let look_up_first = decision.allowed
            && matches!(query.qtype, dns::TYPE_A | dns::TYPE_AAAA)
            && !state.config.resolve.iter().any(|(n, _)| *n == query.name)
            && state
                .lookups_running
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| (n < MAX_LOOKUPS_RUNNING).then_some(n + 1),
                )
                .is_ok();
        if look_up_first {
            let (socket, state) = (socket.clone(), state.clone());
            std::thread::spawn(move || {
                let decision = match state.lookups.get(&query.name) {
                    Ok(_) => decision,
                    Err(e) => Decision {
                        allowed: false,
                        rule: format!("the host cannot resolve {}: {e}", query.name),
                    },
                };
                answer_dns(&socket, &state, &query, &decision, from);
                state
                    .lookups_running
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            });
        } else {
            answer_dns(&socket, &state, &query, &decision, from);
        }
    }
}

/// Answer one DNS query as `decision` says, and log it.
fn answer_dns(
    socket: &UdpSocket,
    state: &State,
    query: &dns::Query,
    decision: &Decision,
    from: SocketAddr,
) {
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
    let mut e = event("dns", decision);
    e.name = Some(query.name.clone());
    e.protocol = "dns";
    (state.config.on_event)(&e);
    let _ = socket.send_to(&reply, from);
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

/// The sandbox's own loopback (and "any"): connecting there stays inside it.
fn inside_the_sandbox(ip: IpAddr) -> bool {
    let ip = crate::ip::canonical(ip);
    ip.is_loopback() || ip.is_unspecified()
}

fn serve_connects(notifier: Notifier, state: Arc<State>, relay: u16) {
    let notifier = Arc::new(notifier);
    loop {
        let Ok(n) = notifier.recv() else {
            return; // no process of the sandbox is left
        };
        // Connects that stay inside (unix sockets, the sandbox's own loopback) are let through
        // here at once: no thread for them.
        let (memory, dest) = match read_connect(&notifier, &n) {
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
        // thread of the sandbox, so their number is bounded by its process limit.)
        let (notifier, state) = (notifier.clone(), state.clone());
        std::thread::spawn(move || {
            if let Err(err) = handle_connect(&notifier, &state, relay, &n, &memory, dest) {
                refuse_unread(&notifier, &state, &n, &err);
            }
        });
    }
}

/// The process went away meanwhile, or its memory or the answer failed: refuse, if it waits;
/// the attempt is an event all the same.
fn refuse_unread(
    notifier: &Notifier,
    state: &State,
    n: &airlock_jail::gate::Notification,
    err: &io::Error,
) {
    let decision = Decision {
        allowed: false,
        rule: format!("the gate could not read or answer this connect: {err}"),
    };
    (state.config.on_event)(&event("connect", &decision));
    let _ = notifier.fail(n.id, libc::ECONNREFUSED);
}

/// The process's memory and the address notification `n` connects to, when that is an IPv4 or
/// IPv6 address outside the sandbox; None when the kernel may run the connect as it is (another
/// family — the namespace and Landlock decide, as without a gate — or the sandbox's own
/// loopback).
fn read_connect(
    notifier: &Notifier,
    n: &airlock_jail::gate::Notification,
) -> io::Result<Option<(Memory, SocketAddr)>> {
    if i64::from(n.nr) != libc::SYS_connect {
        return Ok(None);
    }
    let memory = Memory::open(notifier, n)?;
    let raw = memory.read(n.args[1], (n.args[2] as usize).min(128))?;
    Ok(parse_sockaddr(&raw)
        .filter(|dest| !inside_the_sandbox(dest.ip()))
        .map(|dest| (memory, dest)))
}

fn handle_connect(
    notifier: &Notifier,
    state: &Arc<State>,
    relay: u16,
    n: &airlock_jail::gate::Notification,
    memory: &Memory,
    dest: SocketAddr,
) -> io::Result<()> {
    if is_cut(state) {
        return notifier.fail(n.id, libc::ENETUNREACH);
    }
    let socket = socket_info(n.pid, n.args[0])?;
    let stream = socket.kind == libc::SOCK_STREAM;
    if socket.v6_only && dest.is_ipv6() {
        // The relay's address is IPv4-mapped for an IPv6 socket; without this its connect would
        // fail where a direct one succeeds. If the socket is bound already, the kernel refuses,
        // and the connect fails as before.
        let _ = socket.allow_ipv4_mapped();
    }
    if stream && crate::ip::canonical(dest.ip()) == PROXY.ip() && dest.port() == PROXY.port() {
        // airlock's proxy: the request on the connection is decided, not the connection.
        return hand_over(
            memory,
            notifier,
            state,
            relay,
            n,
            dest,
            (
                Target {
                    name: None,
                    addr: PROXY,
                    proxy: true,
                    forwarded: false,
                },
                None,
            ),
        );
    }
    let name = state
        .synthetic
        .lock()
        .ok()
        .and_then(|s| s.name_of(dest.ip()).map(str::to_string));
    if !stream {
        if name.is_some() {
            // A resolver's probe: glibc connects a UDP socket to each address it got, to pick
            // the source address, and sends nothing. Nothing can leave over it anyway.
            return notifier.fail(n.id, libc::ENETUNREACH);
        }
        let decision = Decision {
            allowed: false,
            rule: "UDP leaves the sandbox only as DNS to its own resolver".into(),
        };
        let mut e = event("connect", &decision);
        (e.name, e.ip, e.port, e.protocol) = (name, Some(dest.ip()), Some(dest.port()), "udp");
        (state.config.on_event)(&e);
        return notifier.fail(n.id, libc::ENETUNREACH);
    }
    let (decision, target) = match &name {
        Some(name) => match resolve(state, name, dest.port()) {
            Ok((addr, trusted)) => (decide(state, Some(name), addr, trusted), Some(addr)),
            Err(e) => (
                Decision {
                    allowed: false,
                    rule: format!("cannot resolve {name} on the host: {e}"),
                },
                None,
            ),
        },
        None => (decide(state, None, dest, false), Some(dest)),
    };
    let mut e = event("connect", &decision);
    (e.name, e.ip, e.port) = (name.clone(), target.map(|t| t.ip()), Some(dest.port()));
    (state.config.on_event)(&e);
    let Some(target) = target.filter(|_| decision.allowed) else {
        return notifier.fail(n.id, libc::ECONNREFUSED);
    };
    // The destination is connected to while the sandbox's connect waits, so that a port that
    // is not there fails the connect as it would directly (ECONNREFUSED, ETIMEDOUT…) instead of
    // a connection that is then reset. A blocking connect waits for the answer; a non-blocking
    // one (an event loop's) at most NONBLOCKING_WAIT, then goes on while the gate keeps
    // connecting for it.
    let (sender, connecting) = std::sync::mpsc::channel();
    {
        let (state, name) = (state.clone(), name.clone());
        std::thread::spawn(move || {
            let _ = sender.send(connect_upstream(&state, name.as_deref(), target));
        });
    }
    let wait = if socket.nonblocking {
        NONBLOCKING_WAIT
    } else {
        Duration::from_secs(60)
    };
    let early = match connecting.recv_timeout(wait) {
        Ok(Ok(upstream)) => Early::Ready(upstream),
        Ok(Err((_, errno))) => return notifier.fail(n.id, errno),
        Err(_) => Early::Coming(connecting),
    };
    hand_over(
        memory,
        notifier,
        state,
        relay,
        n,
        dest,
        (
            Target {
                name,
                addr: target,
                proxy: false,
                forwarded: false,
            },
            Some(early),
        ),
    )
}

/// Send the sandbox's connect to the relay, at the address that names `target`.
fn hand_over(
    memory: &Memory,
    notifier: &Notifier,
    state: &State,
    relay: u16,
    n: &airlock_jail::gate::Notification,
    dest: SocketAddr,
    (target, early): (Target, Option<Early>),
) -> io::Result<()> {
    // The sandbox's own socket connects, in its own namespace, to the relay at an address that
    // says which target this is: the connect's address is rewritten, then the kernel runs it.
    // Whatever the process does to that memory meanwhile only reaches its own namespace.
    let id = state
        .next_pending
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        % RELAY_IDS;
    if let Ok(mut pending) = state.pending.lock() {
        // A connect the kernel then failed (the socket was connected already, say) never
        // reaches the relay: its entry is dropped once it is surely stale, and the table is
        // bounded, so a sandbox cannot grow it without end.
        if pending.len() >= 1024 {
            pending.retain(|_, entry| entry.since.elapsed() < Duration::from_secs(10));
        }
        if pending.len() >= MAX_PENDING {
            return notifier.fail(n.id, libc::EAGAIN);
        }
        pending.insert(
            id,
            Pending {
                target,
                since: Instant::now(),
                early,
            },
        );
    }
    let relay_ip = relay_address(id);
    let mut sockaddr = Vec::with_capacity(28);
    if dest.is_ipv6() {
        sockaddr.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        sockaddr.extend_from_slice(&relay.to_be_bytes());
        sockaddr.extend_from_slice(&[0; 4]); // flow info
        sockaddr.extend_from_slice(&relay_ip.to_ipv6_mapped().octets());
        sockaddr.extend_from_slice(&[0; 4]); // scope id
    } else {
        sockaddr.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        sockaddr.extend_from_slice(&relay.to_be_bytes());
        sockaddr.extend_from_slice(&relay_ip.octets());
        sockaddr.extend_from_slice(&[0; 8]);
    }
    // An IPv6 address may come in the 24 bytes of RFC 2133 (no scope id), which the kernel
    // accepts; the relay's address (scope id 0) is written in as many bytes as were given.
    let given = n.args[2] as usize;
    let least = if dest.is_ipv6() { 24 } else { 16 };
    if given < least {
        return notifier.fail(n.id, libc::EINVAL);
    }
    memory.write(n.args[1], &sockaddr[..given.min(sockaddr.len())])?;
    notifier.pass(n.id)
}

/// How many relay addresses there are (127.64.0.0/10).
const RELAY_IDS: u32 = 1 << 22;
/// The most connects on their way to the relay at once.
const MAX_PENDING: usize = 16_384;

/// The relay address for pending connection `id`: 127.64.0.0 + id.
fn relay_address(id: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 64, 0, 0)) + (id % RELAY_IDS))
}

/// The pending id of a relay address, if it is one.
fn relay_id(addr: IpAddr) -> Option<u32> {
    match crate::ip::canonical(addr) {
        IpAddr::V4(v4) => u32::from(v4)
            .checked_sub(u32::from(Ipv4Addr::new(127, 64, 0, 0)))
            .filter(|id| *id < RELAY_IDS),
        IpAddr::V6(_) => None,
    }
}

/// Resolve `name` on the host (or by the user's override): the address to connect to, and
/// whether it came from the override.
fn resolve(state: &State, name: &str, port: u16) -> io::Result<(SocketAddr, bool)> {
    if let Some((_, ip)) = state.config.resolve.iter().find(|(n, _)| n == name) {
        return Ok((SocketAddr::new(*ip, port), true));
    }
    // Most often answered already, when the sandbox asked the gate's DNS for the name.
    let addrs = state.lookups.get(name).map_err(io::Error::other)?;
    let ip = addrs
        .first()
        .copied()
        .ok_or_else(|| io::Error::other("no address"))?;
    Ok((SocketAddr::new(ip, port), false))
}

fn serve_relay(listener: &TcpListener, state: &Arc<State>) {
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

/// The first bytes a client sent, and whether it then closed its side.
struct FirstBytes {
    bytes: Vec<u8>,
    closed: bool,
}

/// Connect to the destination a connection was allowed to; when that address does not take it,
/// the name's other host addresses that the rules allow too, in the resolver's order (as a
/// program connecting directly would: `::1` then `127.0.0.1`, say). A failure is an event (the
/// attempt was allowed, and then nothing answered), and its text is returned.
fn connect_upstream(
    state: &State,
    name: Option<&str>,
    addr: SocketAddr,
) -> Result<TcpStream, Unreached> {
    let first = match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
        Ok(stream) => return Ok(stream),
        Err(err) => err,
    };
    // What a direct connect would have failed with (a timeout here is the gate's 10 s).
    let errno = match first.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => libc::ETIMEDOUT,
        _ => first.raw_os_error().unwrap_or(libc::ECONNREFUSED),
    };
    let mut tried = vec![format!("{addr}: {first}")];
    let others = name
        .filter(|name| !state.config.resolve.iter().any(|(n, _)| n == name))
        .and_then(|name| state.lookups.get(name).ok().map(|ips| (name, ips)));
    if let Some((name, ips)) = others {
        for ip in ips.into_iter().filter(|ip| *ip != addr.ip()) {
            let other = SocketAddr::new(ip, addr.port());
            let decision = decide(state, Some(name), other, false);
            if !decision.allowed {
                continue;
            }
            match TcpStream::connect_timeout(&other, Duration::from_secs(10)) {
                Ok(stream) => {
                    // The log names the address the connection went to, and the rule for it.
                    let decision = Decision {
                        allowed: true,
                        rule: format!("{} (after {}: {first})", decision.rule, addr.ip()),
                    };
                    let mut e = event("connect", &decision);
                    (e.name, e.ip, e.port) = (Some(name.to_string()), Some(ip), Some(addr.port()));
                    (state.config.on_event)(&e);
                    return Ok(stream);
                }
                Err(err) => tried.push(format!("{other}: {err}")),
            }
        }
    }
    let why = format!(
        "the destination did not take the connection ({})",
        tried.join("; ")
    );
    let decision = Decision {
        allowed: true,
        rule: why.clone(),
    };
    let mut e = event("failed", &decision);
    (e.name, e.ip, e.port) = (name.map(str::to_string), Some(addr.ip()), Some(addr.port()));
    (state.config.on_event)(&e);
    Err((why, errno))
}

/// How long a connection by name may stay silent on both sides before the gate gives up on
/// learning what it is for (a connection opened ahead, a server slow to greet).
const FIRST_WORD: Duration = Duration::from_secs(60);

/// Read the first bytes (until they say what they are, the client closes its side, or 10 s
/// pass).
fn first_bytes(client: &mut TcpStream) -> FirstBytes {
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

/// Copy until end of file or an error; the bytes copied. Through a pipe with splice, so the bytes
/// never come up to this process; a plain read/write loop where splice is refused.
fn copy(from: &mut TcpStream, to: &mut TcpStream) -> u64 {
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
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EINVAL) if total == 0 => break,
                Err(_) => return total,
            };
            let mut left = n;
            while left > 0 {
                match splice(&pipe_read, None, &*to, None, left, flags) {
                    Ok(0) => return total,
                    Ok(m) => left -= m,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => return total,
                }
            }
            total += n as u64;
        }
    }
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

/// [`copy`] for plain HTTP: the client's requests pass only as [`crate::http1::Requests`] lets
/// them. Err: a request was refused (bytes copied, and why).
fn copy_requests(
    from: &mut TcpStream,
    to: &mut TcpStream,
    mut requests: crate::http1::Requests,
) -> Result<u64, (u64, crate::http1::Refusal)> {
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

/// A connection to airlock's proxy: decide its request (CONNECT host:port, or an absolute-form
/// http:// request) as the gate decides a connection, then go on as a connection to that host.
fn proxy(mut client: TcpStream, state: &State, listed: &Listed) {
    let FirstBytes {
        bytes: head,
        closed,
    } = first_bytes(&mut client);
    if head.is_empty() && closed {
        return; // connected and closed without a word: nothing was asked
    }
    let refuse = |client: &mut TcpStream, status: &str, decision: &Decision| {
        let body = format!(
            "{{\"error\":\"refused by airlock\",\"rule\":{}}}\n",
            serde_json_string(&decision.rule)
        );
        let _ = client.write_all(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    };
    let (method, host, port) = match sni::peek(&head) {
        Peek::Http {
            method,
            host: Some(host),
            port,
        } => (method, host, port),
        other => {
            let rule = match other {
                Peek::Malformed { why } => format!("a request the gate cannot check: {why}"),
                _ => "not a proxy request".into(),
            };
            let decision = Decision {
                allowed: false,
                rule,
            };
            refuse(&mut client, "400 Bad Request", &decision);
            return;
        }
    };
    let connect = method == "CONNECT";
    let https = head
        .windows(9)
        .take(32)
        .any(|w| w.eq_ignore_ascii_case(b" https://"));
    let port = port.unwrap_or(if connect || https { 443 } else { 80 });
    let (decision, addr) =
        if !state.config.egress.may_resolve(&host).allowed && host.parse::<IpAddr>().is_err() {
            (state.config.egress.may_resolve(&host), None)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            let addr = SocketAddr::new(ip, port);
            (decide(state, None, addr, false), Some(addr))
        } else {
            match resolve(state, &host, port) {
                Ok((addr, trusted)) => (decide(state, Some(&host), addr, trusted), Some(addr)),
                Err(e) => (
                    Decision {
                        allowed: false,
                        rule: format!("cannot resolve {host} on the host: {e}"),
                    },
                    None,
                ),
            }
        };
    let mut e = event("connect", &decision);
    (e.name, e.ip, e.port, e.protocol) = (
        Some(host.clone()),
        addr.map(|a| a.ip()),
        Some(port),
        "http-proxy",
    );
    (state.config.on_event)(&e);
    let Some(addr) = addr.filter(|_| decision.allowed) else {
        refuse(&mut client, "403 Forbidden", &decision);
        return;
    };
    let name = host.parse::<IpAddr>().is_err().then_some(host);
    // The destination first: a client told "established" (or sent an empty reply) when the
    // server is not there would take a closed port for an open one.
    let upstream = match connect_upstream(state, name.as_deref(), addr) {
        Ok(upstream) => upstream,
        Err(_) => {
            // The addresses tried are in the audit log, not told to the sandbox (they are the
            // host's answers, which its synthetic addresses stand for).
            let decision = Decision {
                allowed: false,
                rule: "the destination did not take the connection".into(),
            };
            refuse(&mut client, "502 Bad Gateway", &decision);
            return;
        }
    };
    if connect {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .is_err()
        {
            return;
        }
        // What the client sent after the CONNECT head without waiting for the answer (its TLS
        // hello, say) is the tunnel's first bytes.
        let after_head = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(Vec::new(), |end| head[end + 4..].to_vec());
        relay_with(
            client,
            Target {
                name,
                addr,
                proxy: false,
                forwarded: false,
            },
            state,
            after_head,
            Some(Early::Ready(upstream)),
            listed,
        );
    } else {
        // The request goes on in origin form (`GET /path`), as servers expect; its Host header
        // is then checked against the target like any connection's.
        relay_with(
            client,
            Target {
                name,
                addr,
                proxy: false,
                forwarded: true,
            },
            state,
            origin_form(&head),
            Some(Early::Ready(upstream)),
            listed,
        );
    }
}

/// `GET http://host:port/path HTTP/1.1` becomes `GET /path HTTP/1.1`; the rest is kept.
fn origin_form(head: &[u8]) -> Vec<u8> {
    let Some(line_end) = head.windows(2).position(|w| w == b"\r\n") else {
        return head.to_vec();
    };
    let line = String::from_utf8_lossy(&head[..line_end]);
    let mut parts = line.splitn(3, ' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return head.to_vec();
    };
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
        .unwrap_or(target);
    let path = match rest.find('/') {
        Some(slash) if rest != target => &rest[slash..],
        None if rest != target => "/",
        _ => target,
    };
    let mut out = format!("{method} {path} {version}").into_bytes();
    let Some(head_end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        out.extend_from_slice(&head[line_end..]);
        return out;
    };
    // One request per proxy connection: the client reuses a kept-alive proxy connection for
    // its next request, to this host or another, and the gate relays to one destination and
    // checks requests as a server would read them (origin form). "Connection: close" makes
    // client and server open a new one instead. An upgrade keeps its Connection header: that
    // connection is the upgraded protocol's alone anyway.
    let headers = &head[line_end + 2..head_end + 2];
    let name_is = |line: &[u8], name: &[u8]| {
        line.len() > name.len()
            && line[..name.len()].eq_ignore_ascii_case(name)
            && line[name.len()] == b':'
    };
    let upgrade = headers.split(|b| *b == b'\n').any(|line| {
        name_is(line, b"connection")
            && String::from_utf8_lossy(line)
                .to_ascii_lowercase()
                .contains("upgrade")
    });
    out.extend_from_slice(b"\r\n");
    for line in headers.split_inclusive(|b| *b == b'\n') {
        let hop_by_hop = ["connection", "proxy-connection", "keep-alive"]
            .iter()
            .any(|name| name_is(line, name.as_bytes()));
        if !hop_by_hop || upgrade {
            out.extend_from_slice(line);
        }
    }
    if !upgrade {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[head_end + 4..]);
    out
}

fn serde_json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A relay connection in `State::open` for as long as this lives.
struct Listed<'a> {
    state: &'a State,
    id: u64,
}

/// Relayed connections one sandbox may have open at once; more are refused.
const MAX_OPEN: usize = 4096;

/// How many relayed connections may be open at once: [`MAX_OPEN`], or fewer when this process
/// may not open enough descriptors (each takes about four), after raising its soft limit to the
/// hard one.
fn max_open() -> usize {
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
        let id = state
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        return proxy(client, state, &listed);
    }
    relay_with(client, target, state, Vec::new(), early, &listed)
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
fn relay_with(
    mut client: TcpStream,
    target: Target,
    state: &State,
    mut first: Vec<u8>,
    early: Option<Early>,
    listed: &Listed,
) {
    let started = Instant::now();
    if is_cut(state) {
        return;
    }
    if state.open.lock().map_or(0, |open| open.len()) > state.max_open {
        let decision = Decision {
            allowed: false,
            rule: format!("more than {} connections open at once", state.max_open),
        };
        let mut e = event("connect", &decision);
        (e.name, e.ip, e.port) = (
            target.name.clone(),
            Some(target.addr.ip()),
            Some(target.addr.port()),
        );
        (state.config.on_event)(&e);
        return;
    }
    let upstream = match early {
        Some(Early::Ready(upstream)) => Ok(upstream),
        Some(Early::Coming(connecting)) => connecting
            .recv()
            .unwrap_or_else(|_| Err(("the connect was abandoned".into(), libc::ECONNABORTED))),
        None => connect_upstream(state, target.name.as_deref(), target.addr),
    };
    let Ok(mut upstream) = upstream else {
        // The program's connect went through already (to the relay): a reset, rather than an
        // orderly end, says that nothing was there.
        let reset = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        let _ = nix::sys::socket::setsockopt(&client, nix::sys::socket::sockopt::Linger, &reset);
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
    let mut peeked = sni::peek(&first);
    if peeked == Peek::NeedMore && client_closed {
        // The client said all it will: judged as a server reads it at the end of its input,
        // as if its last line were ended (Python's http.server serves a request line cut short
        // so, and Werkzeug takes the host from an absolute target).
        peeked = sni::peek(
            &[
                first.as_slice(),
                b"

",
            ]
            .concat(),
        );
    }
    let said = match &peeked {
        Peek::Tls { server_name } => Some(server_name.clone()),
        Peek::Http { host, .. } => Some(host.clone()),
        _ => None,
    };
    let refusal = if server_first {
        None
    } else if first.is_empty() && target.name.is_some() {
        // Neither side spoke within the waits: what the client would ask for later is unknown.
        Some(format!(
            "neither side said anything in the {} s the gate waited",
            FIRST_WORD.as_secs()
        ))
    } else if matches!(peeked, Peek::NeedMore | Peek::TooLong) && !first.is_empty() {
        // A TLS hello or an HTTP head that never completed: what it would ask for is unknown.
        Some(
            "the first bytes never said what they are for (an unfinished TLS hello or HTTP head)"
                .to_string(),
        )
    } else if target.name.is_some() && first.starts_with(b"PRI * HTTP/2.0") {
        // Plain-text HTTP/2 names its host in a compressed frame the gate does not read: it could
        // ask an allowed server for any other host. (HTTP/2 over TLS is checked by its SNI.)
        Some("plain-text HTTP/2 (h2c) cannot be checked for the host it asks for".to_string())
    } else if let (Some(_), Peek::Malformed { why }) = (&target.name, &peeked) {
        Some(format!(
            "an HTTP request the gate cannot check as servers would read it: {why}"
        ))
    } else {
        match (&target.name, &said) {
            (Some(name), Some(said)) if said.as_deref() != Some(name.as_str()) => Some(format!(
                "connected to {name} but asked for {}: refused (domain fronting)",
                said.as_deref().unwrap_or("no name")
            )),
            _ => None,
        }
    };
    if let Some(rule) = refusal {
        let decision = Decision {
            allowed: false,
            rule,
        };
        let mut e = event("fronting", &decision);
        (e.name, e.ip, e.port, e.sni) = (
            target.name.clone(),
            Some(target.addr.ip()),
            Some(target.addr.port()),
            said.flatten(),
        );
        (state.config.on_event)(&e);
        return;
    }
    let fronting = |refusal: crate::http1::Refusal| {
        let mut e = event(
            "fronting",
            &Decision {
                allowed: false,
                rule: refusal.to_string(),
            },
        );
        (e.name, e.ip, e.port) = (
            target.name.clone(),
            Some(target.addr.ip()),
            Some(target.addr.port()),
        );
        e
    };
    // Plain HTTP: every request on the connection is checked, not just the first (a kept-alive
    // connection could carry the next one for another host).
    let first_answer = Arc::new(crate::http1::FirstAnswer::default());
    let mut requests = match (&peeked, &target.name) {
        (Peek::Http { .. }, Some(name)) => {
            Some(crate::http1::Requests::new(name, first_answer.clone()))
        }
        _ => None,
    };

    let mut first_out = Vec::new();
    match &mut requests {
        Some(requests) => {
            if let Err(refusal) = requests.feed(&first, &mut first_out) {
                return (state.config.on_event)(&fronting(refusal));
            }
        }
        None => first_out.clone_from(&first),
    }
    if upstream.write_all(&first_out).is_err() {
        return;
    }
    let watch_first_answer = requests
        .as_ref()
        .is_some_and(crate::http1::Requests::first_asked_to_upgrade);
    let (Ok(mut client_read), Ok(mut upstream_read)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let out_thread = std::thread::spawn(move || {
        let outcome = match requests {
            Some(requests) => copy_requests(&mut client_read, &mut upstream, requests),
            None => Ok(copy(&mut client_read, &mut upstream)),
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
    bytes_in += copy(&mut upstream_read, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    let bytes_out = match out_thread.join() {
        Ok(Ok(n)) => n,
        Ok(Err((n, refusal))) => {
            let reused = matches!(refusal, crate::http1::Refusal::OtherHost(_)) && target.forwarded;
            if !reused {
                (state.config.on_event)(&fronting(refusal));
            }
            n
        }
        Err(_) => 0,
    } + first_out.len() as u64;
    let decision = Decision {
        allowed: true,
        rule: "closed".into(),
    };
    let mut e = event("closed", &decision);
    (e.name, e.ip, e.port, e.sni) = (
        target.name.clone(),
        Some(target.addr.ip()),
        Some(target.addr.port()),
        said.flatten(),
    );
    (e.bytes_out, e.bytes_in, e.duration_ms) = (
        Some(bytes_out),
        Some(bytes_in),
        Some(started.elapsed().as_millis() as u64),
    );
    (state.config.on_event)(&e);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_requests_go_on_in_origin_form() {
        assert_eq!(
            origin_form(b"GET http://a.test:8080/x/y?z HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            b"GET /x/y?z HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n".to_vec()
        );
        assert_eq!(
            origin_form(b"GET http://a.test HTTP/1.1\r\n\r\n"),
            b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec()
        );
        assert_eq!(
            origin_form(b"GET /already HTTP/1.1\r\n\r\n"),
            b"GET /already HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec()
        );
        // Kept-alive and proxy hop-by-hop headers go; a body after the head is kept as it is.
        assert_eq!(
            origin_form(
                b"POST http://a.test/p HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: Keep-Alive\r\nconnection: keep-alive\r\nKeep-Alive: 5\r\nContent-Length: 2\r\n\r\nhi"
            ),
            b"POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi".to_vec()
        );
        // An upgrade keeps its Connection header.
        assert_eq!(
            origin_form(b"GET http://a.test/ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
            b"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(serde_json_string("a \"b\" \\ c"), "\"a \\\"b\\\" \\\\ c\"");
    }
}
