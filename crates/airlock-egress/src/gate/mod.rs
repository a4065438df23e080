//! The supervisor's network gate for one sandbox: what decides and relays. The jail's part is
//! the seccomp listener and the two sockets in the sandbox's network namespace that [`start`]
//! takes ([`airlock_jail::GateSockets`]; the listener's safe face is [`airlock_jail::gate`]).
//!
//! - **DNS** (`dns.rs`): the sandbox's resolver (127.0.0.53 in its own namespace) is answered
//!   here: a name the profile allows gets synthetic addresses that map back to the name; any
//!   other, NXDOMAIN. Nothing is forwarded.
//! - **connect** (`connect.rs`): every `connect` of the sandbox waits for this gate (seccomp user
//!   notification). Its own loopback passes. A TCP connection to a synthetic address is a
//!   connection to its name: the name is resolved here, on the host, once (`lookup.rs`), and the
//!   address it got is checked (no private, loopback, metadata… unless named by address) and
//!   used. A connection to a bare address is checked as that address. When allowed, the
//!   sandbox's own socket is sent to this gate's relay (`handover.rs`); the connect returns at
//!   once. Refused: ECONNREFUSED. UDP to anything but its own loopback: ENETUNREACH.
//! - **relay** (`relay.rs`): before anything reaches the destination (`upstream.rs`), the first
//!   bytes are read: a TLS ClientHello must name the same host (SNI), an HTTP request the same
//!   Host; otherwise the connection is closed (no domain fronting, `fronting.rs`). Then bytes are
//!   copied both ways (`copy.rs`) — except a TLS connection to a name the session holds a
//!   secret for ([`Config::inject`]), which the injector terminates and serves request by
//!   request ([`crate::inject`]).
//! - **proxy** (`proxy.rs`): airlock's HTTP proxy, for programs that honour HTTP_PROXY: its
//!   request is decided as a connection would be, then relayed as one.
//!
//! Every attempt is a [`NetEvent`] for the caller (the audit log, a notice on stderr).

mod connect;
mod copy;
mod dns;
mod event;
mod fronting;
mod handover;
mod lookup;
mod proxy;
mod relay;
mod upstream;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::dns::Synthetic;
use crate::rules::{Decision, Egress};

pub use event::{NetEvent, NetEventKind};
pub(crate) use proxy::json_string;

/// Where the sandbox finds airlock's HTTP proxy (set as HTTP_PROXY and friends): an address
/// of the synthetic range that no name is given, answered by this gate.
pub const PROXY_URL: &str = "http://198.19.255.254:3128";
const PROXY: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 19, 255, 254)), 3128);

/// What the gate needs besides the sandbox.
pub struct Config {
    pub egress: Egress,
    /// Names resolved to these addresses instead of through the host's resolver; taken as the
    /// user's own word, so a loopback or private address given here is not refused.
    pub resolve: Vec<(String, IpAddr)>,
    pub on_event: Box<dyn Fn(&NetEvent) + Send + Sync>,
    /// When this file appears, the network is cut: open connections are closed, new ones and
    /// DNS refused (`airlock kill --network`).
    pub cut_when: Option<std::path::PathBuf>,
    /// Terminates TLS for the hosts it holds secrets for, and injects them (see
    /// [`crate::inject`]); None: every connection is relayed as it is.
    pub inject: Option<Arc<crate::inject::Injector>>,
    /// Connections the profile's `ask` names are put to a person through this; None: they are
    /// refused as any other the profile does not allow.
    pub approvals: Option<Approvals>,
}

/// `[network] ask` and who answers it.
pub struct Approvals {
    pub ask: airlock_rules::Ask,
    pub approver: Arc<dyn Approver>,
}

/// A person's decision on a connection the profile's `ask` names, which the gate holds
/// meanwhile. Given by the caller (the run's supervisor in core: it records the question,
/// offers it and waits for the answer), so that the gate knows nothing of where it is asked.
pub trait Approver: Send + Sync {
    /// Wait until a person decides on `question`, or until nobody did in time: the decision
    /// (allowed or refused) and why, naming who decided.
    fn decide(&self, question: &Question) -> Decision;
}

/// A connection waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The name the sandbox asked for, or the address it connected to by address.
    pub host: String,
    pub port: u16,
    /// The program that connects (see [`NetEvent::program`]).
    pub program: Option<String>,
    /// The `ask` entry that names it, as written (`*` for `ask = ["*"]`).
    pub entry: String,
}

/// What the gate decides a connection by: the profile's rules and the host's own addresses.
#[derive(Clone, Copy)]
struct Rules<'a> {
    egress: &'a Egress,
    /// See [`host_addresses`].
    host_addresses: &'a [IpAddr],
    /// What a person is asked about (None: nothing, there is nobody to ask).
    ask: Option<&'a airlock_rules::Ask>,
}

impl Rules<'_> {
    /// Decide a connection to `addr`, reached by `name` (None: by bare address); `trusted`
    /// when the user mapped the name to the address themselves (`--resolve`).
    fn decide(&self, name: Option<&str>, addr: SocketAddr, trusted: bool) -> Decision {
        match name {
            Some(name) if trusted => self.egress.decide_trusted(name, addr.ip(), addr.port()),
            _ => self
                .egress
                .decide_on_host(name, addr.ip(), addr.port(), self.host_addresses),
        }
    }

    /// The `ask` entry that puts a connection [`Rules::decide`] refused to a person, if one does.
    fn asks(&self, name: Option<&str>, addr: SocketAddr, trusted: bool) -> Option<String> {
        self.ask?.asks(
            self.egress,
            name,
            addr.ip(),
            addr.port(),
            trusted,
            self.host_addresses,
        )
    }

    /// The `ask` entry of a name that only `ask` covers (the profile alone would not let the
    /// sandbox resolve it): put to a person before the host looks it up, as whatever the
    /// sandbox put in the name would reach the nameserver of the zone it chose.
    fn asks_before_lookup(&self, name: &str) -> Option<String> {
        if self.egress.may_resolve(name).allowed {
            return None;
        }
        let decision = self.ask?.may_resolve(self.egress, name)?;
        decision.rule.strip_prefix("ask ").map(str::to_string)
    }

    /// What a person's yes to `name` comes to once it is looked up: an address no approval opens
    /// (protected: loopback, private, metadata, the host's own; or one a deny entry names) is
    /// refused all the same. The decision, and the address when there is one.
    fn after_approval(
        &self,
        name: &str,
        port: u16,
        approved: Decision,
        resolve: impl FnOnce(&str, u16) -> std::io::Result<(SocketAddr, bool)>,
    ) -> (Decision, Option<SocketAddr>) {
        match resolve(name, port) {
            Ok((addr, trusted)) => {
                let opens = self.decide(Some(name), addr, trusted).allowed
                    || self.asks(Some(name), addr, trusted).is_some();
                if opens {
                    (approved, Some(addr))
                } else {
                    (
                        deny(format!(
                            "{name} resolves to {}, which no approval opens (a protected address, or one a deny entry names)",
                            addr.ip()
                        )),
                        Some(addr),
                    )
                }
            }
            Err(e) => (
                deny(format!("cannot resolve {name} on the host: {e}")),
                None,
            ),
        }
    }

    /// May the sandbox resolve `name`: allowed, or a name a person may let it connect to (its
    /// rule says so: see [`airlock_rules::Ask::rule_asks`]).
    fn may_resolve(&self, name: &str) -> Decision {
        let decision = self.egress.may_resolve(name);
        match self.ask {
            Some(ask) if !decision.allowed => {
                ask.may_resolve(self.egress, name).unwrap_or(decision)
            }
            _ => decision,
        }
    }
}

/// One gate's state, shared by its threads.
struct State {
    config: Config,
    /// Set once the network is cut.
    cut: AtomicBool,
    /// Open relay connections (a clone of the sandbox side), to close when the network is cut.
    open: Mutex<HashMap<u64, Vec<TcpStream>>>,
    next_id: AtomicU64,
    synthetic: Mutex<Synthetic>,
    /// Connections the connect handler sent to the relay, by the id in the relay address they
    /// were sent to (127.64.0.0/10 + id), and when.
    pending: Mutex<HashMap<u32, handover::Pending>>,
    /// At most this many relayed connections open at once (see [`relay::max_open`]).
    max_open: usize,
    next_pending: AtomicU32,
    /// See [`host_addresses`].
    host_addresses: Vec<IpAddr>,
    /// What the host's resolver said of each name lately (see [`lookup::HostLookups`]).
    lookups: lookup::HostLookups,
    /// Host lookups started for DNS queries and not yet answered (see [`dns::serve`]).
    lookups_running: Arc<AtomicUsize>,
    /// What the gate took from the sandbox and has not finished with (its event may not be
    /// written yet): DNS datagrams, DNS-over-TCP connections, connects.
    answering: Arc<AtomicUsize>,
    /// Events logged so far.
    events: AtomicU64,
    /// The sandbox's DNS socket and listener (copies), to see whether queries still wait there.
    queues: Vec<std::os::fd::OwnedFd>,
}

impl State {
    fn new(config: Config, host_addresses: Vec<IpAddr>, max_open: usize) -> State {
        State {
            config,
            cut: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            synthetic: Mutex::new(Synthetic::default()),
            pending: Mutex::new(HashMap::new()),
            next_pending: AtomicU32::new(1),
            host_addresses,
            max_open,
            lookups: lookup::HostLookups::default(),
            lookups_running: Arc::new(AtomicUsize::new(0)),
            answering: Arc::new(AtomicUsize::new(0)),
            events: AtomicU64::new(0),
            queues: Vec::new(),
        }
    }

    /// Is anything the sandbox sent still waiting for the gate or being answered (a DNS query
    /// in its socket, a connection to its resolver, a connect)? Its event is not written yet.
    fn answering(&self) -> bool {
        if self.answering.load(Ordering::SeqCst) > 0
            || self.lookups_running.load(Ordering::SeqCst) > 0
        {
            return true;
        }
        let mut fds: Vec<nix::poll::PollFd> = self
            .queues
            .iter()
            .map(|fd| {
                nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(fd), nix::poll::PollFlags::POLLIN)
            })
            .collect();
        matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
    }

    fn rules(&self) -> Rules<'_> {
        Rules {
            egress: &self.config.egress,
            host_addresses: &self.host_addresses,
            ask: self.config.approvals.as_ref().map(|a| &a.ask),
        }
    }

    fn log(&self, event: &NetEvent) {
        self.events.fetch_add(1, Ordering::SeqCst);
        (self.config.on_event)(event);
    }

    /// What a person decided of a connection the profile's `ask` names: refused when there is
    /// nobody to ask (cannot be: [`Rules::asks`] names nothing then).
    fn approve(&self, question: &Question) -> Decision {
        match &self.config.approvals {
            Some(approvals) => approvals.approver.decide(question),
            None => deny("nobody to ask"),
        }
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    /// Relayed connections open and connects on their way to the relay: what the bound on
    /// connections ([`State::max_open`]) counts.
    fn connections(&self) -> usize {
        let open = self.open.lock().map_or(0, |open| open.len());
        let pending = self.pending.lock().map_or(0, |mut pending| {
            pending.retain(|_, entry| entry.since.elapsed() < handover::STALE);
            pending.len()
        });
        open + pending
    }

    /// The refusal of a connection over that bound.
    fn too_many(&self) -> Decision {
        deny(format!(
            "more than {} connections open or opening at once (a connect the kernel refused still counts for 10 s)",
            self.max_open
        ))
    }

    /// Close every open relay connection, both ways.
    fn close_all(&self) {
        if let Ok(open) = self.open.lock() {
            for stream in open.values().flatten() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// A place taken in a count (bounded or not), given back when it is dropped: what the gate is
/// answering ([`State::answering`]), host lookups at once, connections served at once.
pub(super) struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place in `count`, if it holds fewer than `max`.
    pub(super) fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(count.clone()))
    }

    /// A place in `count`, however many it holds.
    pub(super) fn counted(count: &Arc<AtomicUsize>) -> Slot {
        count.fetch_add(1, Ordering::SeqCst);
        Slot(count.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A started gate, to be finished when the sandbox has ended.
pub struct Running(Arc<State>);

impl Running {
    /// Has the sandbox used the network at all (anything logged)? A refusing gate's run whose
    /// sandbox did may have processes still asking as it ends: they are waited for.
    pub fn used(&self) -> bool {
        self.0.events.load(Ordering::SeqCst) > 0
    }

    /// The sandbox has ended: close what it left open and wait (at most `within`) until every
    /// connection's last event was delivered, and every DNS query it sent was answered, so that
    /// none is lost when the caller exits. (Its processes are gone or being killed: a query sent
    /// is in the socket, or it was never sent.)
    pub fn finish(&self, within: Duration) {
        self.0.close_all();
        let deadline = Instant::now() + within;
        let busy = |state: &State| {
            state.open.lock().is_ok_and(|open| !open.is_empty()) || state.answering()
        };
        while Instant::now() < deadline && busy(&self.0) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Start the gate's threads; they end with the sandbox. A sandbox without a relay (its profile
/// has no network) gets a gate that answers its resolver and refuses every connect that leaves
/// its loopback, and says so.
pub fn start(sockets: airlock_jail::GateSockets, config: Config) -> io::Result<Running> {
    let relaying = config.egress != Egress::None;
    // Nothing is allowed without a network: the host's addresses decide nothing then.
    let host_addresses = if relaying {
        host_addresses()?
    } else {
        Vec::new()
    };
    let dns_socket = UdpSocket::from(sockets.dns);
    let mut state = State::new(config, host_addresses, relay::max_open());
    let dns_listener = TcpListener::from(sockets.dns_tcp);
    state.queues = [
        std::os::fd::AsFd::as_fd(&dns_socket).try_clone_to_owned(),
        std::os::fd::AsFd::as_fd(&dns_listener).try_clone_to_owned(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let state = Arc::new(state);
    let relay_port = match sockets.relay {
        // The relay listens in the sandbox's own namespace (the setup process opened it there).
        Some(relay) if relaying => {
            let relay = TcpListener::from(relay);
            let port = relay.local_addr()?.port();
            let relay_state = state.clone();
            std::thread::spawn(move || relay::serve(&relay, &relay_state));
            Some(port)
        }
        _ => None,
    };
    let dns_state = state.clone();
    std::thread::spawn(move || dns::serve(dns_socket, dns_state));
    let dns_tcp_state = state.clone();
    std::thread::spawn(move || dns::serve_tcp(&dns_listener, &dns_tcp_state));
    if let Some(flag) = state.config.cut_when.clone().filter(|_| relaying) {
        let watch_state = state.clone();
        std::thread::spawn(move || watch_cut(&flag, &watch_state));
    }
    let notifier = sockets.notifier;
    let connects_state = state.clone();
    std::thread::spawn(move || connect::serve(notifier, connects_state, relay_port));
    Ok(Running(state))
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

/// Cut the network once `flag` exists: nothing new is let through, and what is open is closed.
fn watch_cut(flag: &std::path::Path, state: &State) {
    while !flag.exists() {
        std::thread::sleep(Duration::from_millis(50));
    }
    state.cut.store(true, Ordering::SeqCst);
    state.close_all();
    state.log(&NetEvent::new(NetEventKind::Cut, &cut_decision()));
}

fn cut_decision() -> Decision {
    Decision {
        allowed: false,
        rule: "the network was cut (airlock kill --network)".into(),
    }
}

/// A refusal, with why.
fn deny(rule: impl Into<String>) -> Decision {
    Decision {
        allowed: false,
        rule: rule.into(),
    }
}

/// The proxy's request reader as (host, port, tunnel), for the fuzz targets ([`crate::fuzzing`]).
pub(crate) fn read_proxy_request(head: &[u8]) -> Result<(String, u16, bool), String> {
    proxy::read_request(head).map(|asked| (asked.host, asked.port, asked.tunnel))
}
