//! The sandbox's connects, held by seccomp until the gate answers: read, decided, and then
//! refused, let through (inside the sandbox) or handed to the relay.
//!
//! The decision itself, [`decide`], is over plain data (where the connect goes, the socket's
//! type, the name the address stands for) so that it is tested without a sandbox.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use airlock_jail::gate::{socket_info, Memory, Notification, Notifier};

use super::handover::hand_over;
use super::relay::Target;
use super::upstream::{self, Early};
use super::{deny, lookup, Event, Rules, State, PROXY};

/// How long a non-blocking connect waits for the destination before it goes on (the program's
/// event loop waits meanwhile): enough for a nearby host's refusal to come back as one.
const NONBLOCKING_WAIT: Duration = Duration::from_millis(100);
/// How long a blocking connect waits for the destination (each of its addresses has 10 s).
const BLOCKING_WAIT: Duration = Duration::from_secs(60);

/// A connect the sandbox waits in: the notification, the memory of its process, and the
/// listener that answers it.
pub(super) struct Call<'a> {
    notifier: &'a Notifier,
    n: &'a Notification,
    memory: &'a Memory,
}

impl Call<'_> {
    /// Let the kernel run the connect (at the address it now holds).
    pub(super) fn pass(&self) -> io::Result<()> {
        self.notifier.pass(self.n.id)
    }

    /// The connect fails with `errno`.
    pub(super) fn fail(&self, errno: i32) -> io::Result<()> {
        self.notifier.fail(self.n.id, errno)
    }

    /// The length of the address the program passed (connect's third argument).
    pub(super) fn addr_len(&self) -> usize {
        self.n.args[2] as usize
    }

    /// Write over the address the program passed.
    pub(super) fn write_addr(&self, bytes: &[u8]) -> io::Result<()> {
        self.memory.write(self.n.args[1], bytes)
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
}

pub(super) fn serve(notifier: Notifier, state: Arc<State>, relay: u16) {
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
            let call = Call {
                notifier: &notifier,
                n: &n,
                memory: &memory,
            };
            if let Err(err) = handle(&call, &state, relay, dest) {
                refuse_unread(&notifier, &state, &n, &err);
            }
        });
    }
}

/// The process went away meanwhile, or its memory or the answer failed: refuse, if it waits;
/// the attempt is an event all the same.
fn refuse_unread(notifier: &Notifier, state: &State, n: &Notification, err: &io::Error) {
    let decision = deny(format!(
        "the gate could not read or answer this connect: {err}"
    ));
    state.log(&Event::new("connect", &decision));
    let _ = notifier.fail(n.id, libc::ECONNREFUSED);
}

/// The process's memory and the address notification `n` connects to, when that is an IPv4 or
/// IPv6 address outside the sandbox; None when the kernel may run the connect as it is (another
/// family — the namespace and Landlock decide, as without a gate — or the sandbox's own
/// loopback).
fn read_connect(notifier: &Notifier, n: &Notification) -> io::Result<Option<(Memory, SocketAddr)>> {
    if i64::from(n.nr) != libc::SYS_connect {
        return Ok(None);
    }
    let memory = Memory::open(notifier, n)?;
    let raw = memory.read(n.args[1], (n.args[2] as usize).min(128))?;
    Ok(parse_sockaddr(&raw)
        .filter(|dest| !inside_the_sandbox(dest.ip()))
        .map(|dest| (memory, dest)))
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

/// Answer one connect to `dest`, outside the sandbox.
fn handle(call: &Call<'_>, state: &Arc<State>, relay: u16, dest: SocketAddr) -> io::Result<()> {
    if state.is_cut() {
        return call.fail(libc::ENETUNREACH);
    }
    let socket = socket_info(call.n.pid, call.n.args[0])?;
    if socket.v6_only && dest.is_ipv6() {
        // The relay's address is IPv4-mapped for an IPv6 socket; without this its connect would
        // fail where a direct one succeeds. If the socket is bound already, the kernel refuses,
        // and the connect fails as before.
        let _ = socket.allow_ipv4_mapped();
    }
    let attempt = Attempt {
        dest,
        stream: socket.kind == libc::SOCK_STREAM,
        name: state
            .synthetic
            .lock()
            .ok()
            .and_then(|s| s.name_of(dest.ip()).map(str::to_string)),
    };
    let (answer, event) = decide(&attempt, state.rules(), |name, port| {
        lookup::resolve(state, name, port)
    });
    if let Some(event) = event {
        state.log(&event);
    }
    match answer {
        Answer::Refuse(errno) => call.fail(errno),
        // airlock's proxy: the request on the connection is decided, not the connection.
        Answer::Relay(target) if target.proxy => hand_over(state, relay, call, dest, target, None),
        Answer::Relay(target) => match connect_early(state, &target, socket.nonblocking) {
            Ok(early) => hand_over(state, relay, call, dest, target, Some(early)),
            Err(errno) => call.fail(errno),
        },
    }
}

/// Decide a connect: what becomes of it, and the event to log (None: nothing to log).
/// `resolve` finds the host's address for a name (and whether it is the user's `--resolve`).
pub(super) fn decide(
    attempt: &Attempt,
    rules: Rules<'_>,
    resolve: impl FnOnce(&str, u16) -> io::Result<(SocketAddr, bool)>,
) -> (Answer, Option<Event>) {
    let Attempt { dest, stream, name } = attempt;
    if *stream && crate::ip::canonical(dest.ip()) == PROXY.ip() && dest.port() == PROXY.port() {
        let proxy = Target {
            name: None,
            addr: PROXY,
            proxy: true,
            forwarded: false,
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
        let mut e =
            Event::new("connect", &decision).about(None, Some(dest.ip()), Some(dest.port()));
        e.protocol = "udp";
        return (Answer::Refuse(libc::ENETUNREACH), Some(e));
    }
    let (decision, target) = match name {
        Some(name) => match resolve(name, dest.port()) {
            Ok((addr, trusted)) => (rules.decide(Some(name), addr, trusted), Some(addr)),
            Err(e) => (
                deny(format!("cannot resolve {name} on the host: {e}")),
                None,
            ),
        },
        None => (rules.decide(None, *dest, false), Some(*dest)),
    };
    let e = Event::new("connect", &decision).about(
        name.clone(),
        target.map(|t| t.ip()),
        Some(dest.port()),
    );
    let answer = match target.filter(|_| decision.allowed) {
        Some(addr) => Answer::Relay(Target {
            name: name.clone(),
            addr,
            proxy: false,
            forwarded: false,
        }),
        None => Answer::Refuse(libc::ECONNREFUSED),
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
mod tests {
    use super::*;
    use crate::rules::{Destination, Egress};

    fn egress() -> Egress {
        let d = |text: &str| Destination::parse(text).unwrap();
        Egress::Allow {
            allow: vec![d("github.com"), d("10.0.0.5:5432"), d("local.test")],
            deny: vec![d("evil.test")],
        }
    }

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn tcp(dest: &str, name: Option<&str>) -> Attempt {
        Attempt {
            dest: at(dest),
            stream: true,
            name: name.map(str::to_string),
        }
    }

    /// The host's resolver as a test wants it: every name at `ip`, `trusted` or not.
    fn host_says(ip: &str, trusted: bool) -> impl Fn(&str, u16) -> io::Result<(SocketAddr, bool)> {
        let ip: IpAddr = ip.parse().unwrap();
        move |_, port| Ok((SocketAddr::new(ip, port), trusted))
    }

    fn no_lookup(name: &str, _: u16) -> io::Result<(SocketAddr, bool)> {
        panic!("{name} was looked up")
    }

    fn decide_with(
        attempt: &Attempt,
        resolve: impl FnOnce(&str, u16) -> io::Result<(SocketAddr, bool)>,
    ) -> (Answer, Option<Event>) {
        let egress = egress();
        let host = ["45.45.45.45".parse().unwrap()];
        let rules = Rules {
            egress: &egress,
            host_addresses: &host,
        };
        decide(attempt, rules, resolve)
    }

    #[test]
    fn an_allowed_name_goes_to_the_relay_at_the_hosts_address() {
        // The sandbox connects to the synthetic address its DNS got for github.com.
        let attempt = tcp("198.18.0.1:443", Some("github.com"));
        let (answer, event) = decide_with(&attempt, host_says("140.82.112.3", false));
        assert_eq!(
            answer,
            Answer::Relay(Target {
                name: Some("github.com".into()),
                addr: at("140.82.112.3:443"),
                proxy: false,
                forwarded: false,
            })
        );
        let event = event.unwrap();
        assert_eq!((event.kind, event.protocol), ("connect", "tcp"));
        assert!(event.allowed);
        assert_eq!(event.rule, "allow github.com");
        assert_eq!(event.name.as_deref(), Some("github.com"));
        assert_eq!(event.ip, Some("140.82.112.3".parse().unwrap()));
        assert_eq!(event.port, Some(443));
    }

    #[test]
    fn a_name_at_a_private_address_is_refused_and_logged() {
        let attempt = tcp("198.18.0.1:443", Some("github.com"));
        let (answer, event) = decide_with(&attempt, host_says("192.168.1.1", false));
        assert_eq!(answer, Answer::Refuse(libc::ECONNREFUSED));
        let event = event.unwrap();
        assert!(!event.allowed);
        assert!(event.rule.contains("private"), "{}", event.rule);
        assert_eq!(event.ip, Some("192.168.1.1".parse().unwrap()));
        // The user's own --resolve opens it.
        let attempt = tcp("198.18.0.2:80", Some("local.test"));
        let (answer, event) = decide_with(&attempt, host_says("127.0.0.1", true));
        assert!(matches!(answer, Answer::Relay(Target { addr, .. }) if addr == at("127.0.0.1:80")));
        assert!(event.unwrap().allowed);
    }

    #[test]
    fn a_name_the_host_cannot_resolve_is_refused() {
        let attempt = tcp("198.18.0.1:443", Some("github.com"));
        let (answer, event) = decide_with(&attempt, |_, _| Err(io::Error::other("no address")));
        assert_eq!(answer, Answer::Refuse(libc::ECONNREFUSED));
        let event = event.unwrap();
        assert_eq!(
            event.rule,
            "cannot resolve github.com on the host: no address"
        );
        assert_eq!((event.ip, event.port), (None, Some(443)));
    }

    #[test]
    fn bare_addresses_are_decided_as_addresses() {
        let (answer, event) = decide_with(&tcp("10.0.0.5:5432", None), no_lookup);
        assert!(matches!(answer, Answer::Relay(Target { name: None, .. })));
        assert_eq!(event.unwrap().rule, "allow 10.0.0.5:5432");
        for (dest, why) in [
            ("140.82.112.3:443", "a bare address"),
            ("[::ffff:10.0.0.5]:22", "private"),
            ("169.254.169.254:80", "cloud metadata"),
            ("45.45.45.45:80", "this host's own"),
        ] {
            let (answer, event) = decide_with(&tcp(dest, None), no_lookup);
            assert_eq!(answer, Answer::Refuse(libc::ECONNREFUSED), "{dest}");
            let event = event.unwrap();
            assert!(!event.allowed);
            assert!(event.rule.contains(why), "{dest}: {}", event.rule);
        }
    }

    #[test]
    fn the_proxy_is_relayed_undecided() {
        for dest in ["198.19.255.254:3128", "[::ffff:198.19.255.254]:3128"] {
            let (answer, event) = decide_with(&tcp(dest, None), no_lookup);
            assert!(
                matches!(answer, Answer::Relay(Target { proxy: true, .. })),
                "{dest}"
            );
            assert_eq!(
                event, None,
                "the request on it is logged, not the connection"
            );
        }
        // Another port of that address is no proxy.
        let (answer, _) = decide_with(&tcp("198.19.255.254:80", None), no_lookup);
        assert_eq!(answer, Answer::Refuse(libc::ECONNREFUSED));
    }

    #[test]
    fn udp_is_unreachable_and_a_resolvers_probe_is_not_logged() {
        let probe = Attempt {
            stream: false,
            ..tcp("198.18.0.1:53", Some("github.com"))
        };
        assert_eq!(
            decide_with(&probe, no_lookup),
            (Answer::Refuse(libc::ENETUNREACH), None)
        );
        let out = Attempt {
            stream: false,
            ..tcp("8.8.8.8:53", None)
        };
        let (answer, event) = decide_with(&out, no_lookup);
        assert_eq!(answer, Answer::Refuse(libc::ENETUNREACH));
        let event = event.unwrap();
        assert_eq!(
            (event.kind, event.protocol, event.allowed),
            ("connect", "udp", false)
        );
        assert_eq!(event.ip, Some("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn sockaddrs_are_read_for_inet_families_only() {
        let mut v4 = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        v4.extend_from_slice(&443u16.to_be_bytes());
        v4.extend_from_slice(&[140, 82, 112, 3]);
        v4.extend_from_slice(&[0; 8]);
        assert_eq!(parse_sockaddr(&v4), Some(at("140.82.112.3:443")));
        assert_eq!(parse_sockaddr(&v4[..7]), None, "cut short");
        let mut v6 = (libc::AF_INET6 as u16).to_ne_bytes().to_vec();
        v6.extend_from_slice(&80u16.to_be_bytes());
        v6.extend_from_slice(&[0; 4]);
        v6.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(parse_sockaddr(&v6), Some(at("[2001:db8::1]:80")));
        let unix = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        assert_eq!(
            parse_sockaddr(&[unix, b"\0\0/run/x".to_vec()].concat()),
            None
        );
        assert_eq!(parse_sockaddr(&[]), None);
        assert!(inside_the_sandbox("127.0.0.53".parse().unwrap()));
        assert!(inside_the_sandbox("::ffff:127.0.0.1".parse().unwrap()));
        assert!(inside_the_sandbox("0.0.0.0".parse().unwrap()));
        assert!(!inside_the_sandbox("198.18.0.1".parse().unwrap()));
    }
}
