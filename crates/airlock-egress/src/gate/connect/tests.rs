//! The connect decision over plain data, and one held connect answered against a fake.

use std::sync::Mutex;

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
) -> (Answer, Option<NetEvent>) {
    let egress = egress();
    let host = ["45.45.45.45".parse().unwrap()];
    let rules = Rules {
        egress: &egress,
        host_addresses: &host,
        ask: None,
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
            program: None,
        })
    );
    let event = event.unwrap();
    assert_eq!((event.kind, event.protocol), (NetEventKind::Connect, "tcp"));
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
        (NetEventKind::Connect, "udp", false)
    );
    assert_eq!(event.ip, Some("8.8.8.8".parse().unwrap()));
}

/// A connect held for a test: the socket it is on, the length of its address, and what
/// the gate wrote and answered.
struct Fake {
    socket: Socket,
    addr_len: usize,
    /// Where the gate connected the socket for the program (the relay).
    relayed: Mutex<Option<SocketAddr>>,
    /// `Ok`: passed; `Err(errno)`: failed.
    answered: Mutex<Option<Result<(), i32>>>,
}

impl Fake {
    fn tcp(addr_len: usize) -> Fake {
        Fake {
            socket: Socket {
                stream: true,
                nonblocking: false,
                connection: Connection::None,
            },
            addr_len,
            relayed: Mutex::new(None),
            answered: Mutex::new(None),
        }
    }

    fn answered(&self) -> Option<Result<(), i32>> {
        *self.answered.lock().unwrap()
    }

    fn relayed(&self) -> Option<SocketAddr> {
        *self.relayed.lock().unwrap()
    }
}

impl Held for Fake {
    fn socket(&self, _: SocketAddr) -> io::Result<Socket> {
        Ok(self.socket)
    }
    fn addr_len(&self) -> usize {
        self.addr_len
    }
    fn connect_to(&self, relay: SocketAddr) -> io::Result<()> {
        *self.relayed.lock().unwrap() = Some(relay);
        *self.answered.lock().unwrap() = Some(Ok(()));
        Ok(())
    }
    fn pass(&self) -> io::Result<()> {
        *self.answered.lock().unwrap() = Some(Ok(()));
        Ok(())
    }
    fn fail(&self, errno: i32) -> io::Result<()> {
        *self.answered.lock().unwrap() = Some(Err(errno));
        Ok(())
    }

    fn program(&self) -> Option<String> {
        Some("fake".into())
    }
}

#[test]
fn a_program_name_keeps_what_is_printable() {
    assert_eq!(program_name(b"pip\n").as_deref(), Some("pip"));
    assert_eq!(
        program_name(b"\x1b[31mevil\x07\n").as_deref(),
        Some("[31mevil")
    );
    assert_eq!(program_name(b"\n"), None);
}

const RELAY_PORT: Option<u16> = Some(4242);

/// A gate over `egress` with the user's `resolve` mappings, and the events it logs.
fn gate(egress: Egress, resolve: &[(&str, &str)]) -> (Arc<State>, Arc<Mutex<Vec<NetEvent>>>) {
    gate_bounded(egress, resolve, 64)
}

/// [`gate`], with at most `max_open` connections.
fn gate_bounded(
    egress: Egress,
    resolve: &[(&str, &str)],
    max_open: usize,
) -> (Arc<State>, Arc<Mutex<Vec<NetEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let logged = events.clone();
    let config = super::super::Config {
        egress,
        resolve: resolve
            .iter()
            .map(|(name, ip)| (name.to_string(), ip.parse().unwrap()))
            .collect(),
        on_event: Box::new(move |e: &NetEvent| logged.lock().unwrap().push(e.clone())),
        cut_when: None,
        inject: None,
        approvals: None,
    };
    (Arc::new(State::new(config, Vec::new(), max_open)), events)
}

/// The synthetic address the gate's DNS gives `name`.
fn synthetic(state: &State, name: &str) -> IpAddr {
    state.synthetic.lock().unwrap().addresses(name).unwrap()[0]
}

fn pending_target(state: &State) -> Vec<Target> {
    let pending = state.pending.lock().unwrap();
    pending.values().map(|p| p.target.clone()).collect()
}

#[test]
fn a_cut_network_refuses_every_connect_unlogged() {
    let (state, events) = gate(egress(), &[]);
    state.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, at("10.0.0.5:5432")).unwrap();
    assert_eq!(held.answered(), Some(Err(libc::ENETUNREACH)));
    assert!(events.lock().unwrap().is_empty());
}

#[test]
fn a_refused_connect_is_logged_and_fails() {
    let (state, events) = gate(egress(), &[]);
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, at("140.82.112.3:443")).unwrap();
    assert_eq!(held.answered(), Some(Err(libc::ECONNREFUSED)));
    assert_eq!(held.relayed(), None, "not connected for it");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert!(!events[0].allowed);
    assert!(
        events[0].rule.contains("a bare address"),
        "{}",
        events[0].rule
    );
    assert!(state.pending.lock().unwrap().is_empty());
}

#[test]
fn a_connect_to_the_proxy_is_pointed_at_the_relay() {
    let (state, events) = gate(egress(), &[]);
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, at("198.19.255.254:3128")).unwrap();
    assert_eq!(held.answered(), Some(Ok(())));
    let relay = held.relayed().unwrap();
    assert_eq!(Some(relay.port()), RELAY_PORT);
    let id = crate::gate::handover::relay_id(relay.ip()).unwrap();
    let pending = state.pending.lock().unwrap();
    assert!(pending[&id].target.proxy);
    assert!(events.lock().unwrap().is_empty());
    // An IPv6 socket is connected to the relay's IPv4-mapped address.
    let (state, _) = gate(egress(), &[]);
    let held = Fake::tcp(28);
    handle(
        &held,
        &state,
        RELAY_PORT,
        at("[::ffff:198.19.255.254]:3128"),
    )
    .unwrap();
    let relay = held.relayed().unwrap();
    assert!(relay.is_ipv6());
    assert!(crate::gate::handover::relay_id(relay.ip()).is_some());
    // One too short for its family is refused as the kernel would refuse it.
    let held = Fake::tcp(16);
    handle(
        &held,
        &state,
        RELAY_PORT,
        at("[::ffff:198.19.255.254]:3128"),
    )
    .unwrap();
    assert_eq!(held.answered(), Some(Err(libc::EINVAL)));
}

#[test]
fn an_allowed_name_is_connected_before_its_connect_returns() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (state, events) = gate(egress(), &[("local.test", "127.0.0.1")]);
    let dest = SocketAddr::new(synthetic(&state, "local.test"), port);
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, dest).unwrap();
    assert_eq!(held.answered(), Some(Ok(())));
    assert_eq!(
        pending_target(&state),
        vec![Target {
            name: Some("local.test".into()),
            addr: SocketAddr::new("127.0.0.1".parse().unwrap(), port),
            proxy: false,
            forwarded: false,
            // The program that connected goes with it, for the relay's events.
            program: Some("fake".into()),
        }]
    );
    let pending = state.pending.lock().unwrap();
    let early = &pending.values().next().unwrap().early;
    assert!(matches!(early, Some(Early::Ready(_))), "connected already");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].allowed, "{}", events[0].rule);
    assert_eq!(events[0].name.as_deref(), Some("local.test"));
}

#[test]
fn a_destination_that_is_not_there_fails_the_connect_as_directly() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (state, events) = gate(egress(), &[("local.test", "127.0.0.1")]);
    let dest = SocketAddr::new(synthetic(&state, "local.test"), port);
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, dest).unwrap();
    assert_eq!(held.answered(), Some(Err(libc::ECONNREFUSED)));
    assert!(state.pending.lock().unwrap().is_empty());
    // Allowed, and then nothing answered: both are logged.
    let events = events.lock().unwrap();
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.allowed)).collect();
    assert_eq!(
        kinds,
        [(NetEventKind::Connect, true), (NetEventKind::Failed, true)]
    );
    assert!(
        events[1].rule.contains("did not take the connection"),
        "{}",
        events[1].rule
    );
}

#[test]
fn udp_out_of_the_sandbox_is_unreachable() {
    let (state, events) = gate(egress(), &[]);
    let held = Fake {
        socket: Socket {
            stream: false,
            nonblocking: false,
            connection: Connection::None,
        },
        ..Fake::tcp(16)
    };
    handle(&held, &state, RELAY_PORT, at("8.8.8.8:53")).unwrap();
    assert_eq!(held.answered(), Some(Err(libc::ENETUNREACH)));
    assert_eq!(events.lock().unwrap()[0].protocol, "udp");
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

/// How many connections `listener` has waiting to be accepted (it is made non-blocking).
fn accepted(listener: &std::net::TcpListener) -> usize {
    listener.set_nonblocking(true).unwrap();
    // The gate's connects completed before it answered, so they are all queued by now.
    std::iter::from_fn(|| listener.accept().ok()).count()
}

#[test]
fn a_connect_the_kernel_refuses_opens_nothing() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (state, events) = gate(egress(), &[("local.test", "127.0.0.1")]);
    let dest = SocketAddr::new(synthetic(&state, "local.test"), port);
    for connection in [Connection::Connected, Connection::Connecting] {
        for _ in 0..20 {
            let held = Fake {
                socket: Socket {
                    connection,
                    ..Fake::tcp(16).socket
                },
                ..Fake::tcp(16)
            };
            handle(&held, &state, RELAY_PORT, dest).unwrap();
            // Left to the kernel as it was: it answers EISCONN or EALREADY itself.
            assert_eq!(held.answered(), Some(Ok(())), "{connection:?}");
            assert_eq!(held.relayed(), None, "not connected for it");
        }
    }
    assert!(state.pending.lock().unwrap().is_empty());
    assert!(events.lock().unwrap().is_empty(), "the kernel's own answer");
    assert_eq!(accepted(&listener), 0, "no connection to the destination");
    // The same connect on a socket that is free is sent to the relay: the test can fail.
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, dest).unwrap();
    assert!(held.relayed().is_some());
    assert_eq!(accepted(&listener), 1);
}

#[test]
fn connects_on_their_way_to_the_relay_count_toward_the_bound() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (state, events) = gate_bounded(egress(), &[("local.test", "127.0.0.1")], 3);
    let dest = SocketAddr::new(synthetic(&state, "local.test"), port);
    // None of these reaches the relay (as when the kernel then fails the connect): each stays
    // pending, and the fourth is over the bound.
    let answers: Vec<_> = (0..5)
        .map(|_| {
            let held = Fake::tcp(16);
            handle(&held, &state, RELAY_PORT, dest).unwrap();
            held.answered()
        })
        .collect();
    assert_eq!(
        answers,
        [
            Some(Ok(())),
            Some(Ok(())),
            Some(Ok(())),
            Some(Err(libc::EAGAIN)),
            Some(Err(libc::EAGAIN))
        ]
    );
    assert_eq!(state.pending.lock().unwrap().len(), 3);
    assert_eq!(
        accepted(&listener),
        3,
        "no connection opened past the bound"
    );
    let events = events.lock().unwrap();
    let refused: Vec<_> = events.iter().filter(|e| !e.allowed).collect();
    assert_eq!(refused.len(), 2);
    assert!(
        refused[0].rule.contains("more than 3 connections"),
        "{}",
        refused[0].rule
    );
    // Open relayed connections count the same way.
    drop(events);
    state.pending.lock().unwrap().clear();
    state.open.lock().unwrap().insert(0, Vec::new());
    state.open.lock().unwrap().insert(1, Vec::new());
    state.open.lock().unwrap().insert(2, Vec::new());
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, dest).unwrap();
    assert_eq!(held.answered(), Some(Err(libc::EAGAIN)));
}

/// An approver that answers as told and remembers what it was asked.
struct Person {
    allows: bool,
    asked: Mutex<Vec<super::super::Question>>,
}

impl super::super::Approver for Person {
    fn decide(&self, question: &super::super::Question) -> crate::rules::Decision {
        self.asked.lock().unwrap().push(question.clone());
        crate::rules::Decision {
            allowed: self.allows,
            rule: format!(
                "{} by a test",
                if self.allows { "allowed" } else { "denied" }
            ),
        }
    }
}

/// A gate whose profile asks about `*.asked.test` (and maps it to loopback as --resolve would).
fn asking_gate(allows: bool) -> (Arc<State>, Arc<Mutex<Vec<NetEvent>>>, Arc<Person>) {
    let (state, events) = gate(egress(), &[("api.asked.test", "127.0.0.1")]);
    let mut state = Arc::into_inner(state).unwrap();
    let person = Arc::new(Person {
        allows,
        asked: Mutex::new(Vec::new()),
    });
    state.config.approvals = Some(super::super::Approvals {
        ask: crate::Ask {
            entries: vec![Destination::parse("*.asked.test").unwrap()],
            any: false,
        },
        approver: person.clone(),
    });
    (Arc::new(state), events, person)
}

#[test]
fn a_connect_the_profile_asks_about_waits_for_a_person_and_goes_as_they_say() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for allows in [true, false] {
        let (state, events, person) = asking_gate(allows);
        // Its DNS answers as for an allowed name.
        let dest = SocketAddr::new(synthetic(&state, "api.asked.test"), port);
        let held = Fake::tcp(16);
        handle(&held, &state, RELAY_PORT, dest).unwrap();
        let asked = person.asked.lock().unwrap().clone();
        assert_eq!(
            asked,
            [super::super::Question {
                host: "api.asked.test".into(),
                port,
                program: Some("fake".into()),
                entry: "*.asked.test".into(),
            }]
        );
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 1, "one event, with the person's decision");
        assert_eq!(events[0].allowed, allows);
        assert!(events[0].rule.ends_with("by a test"), "{}", events[0].rule);
        if allows {
            assert_eq!(held.answered(), Some(Ok(())));
            assert_eq!(pending_target(&state).len(), 1);
        } else {
            assert_eq!(held.answered(), Some(Err(libc::ECONNREFUSED)));
            assert!(state.pending.lock().unwrap().is_empty());
        }
    }
}

#[test]
fn what_the_profile_allows_or_does_not_ask_about_is_not_put_to_a_person() {
    let (state, _, person) = asking_gate(true);
    // Allowed by an allow entry; denied by a deny entry; named by nothing; a private address.
    let held = Fake::tcp(16);
    handle(&held, &state, RELAY_PORT, at("10.0.0.5:5432")).unwrap();
    for refused in ["evil.test", "other.test"] {
        let dest = SocketAddr::new(synthetic(&state, refused), 443);
        let held = Fake::tcp(16);
        handle(&held, &state, RELAY_PORT, dest).unwrap();
        assert_eq!(held.answered(), Some(Err(libc::ECONNREFUSED)), "{refused}");
    }
    assert!(person.asked.lock().unwrap().is_empty());
}

#[test]
fn a_name_only_ask_covers_is_looked_up_only_after_a_person_says_yes() {
    let egress = egress();
    let ask = crate::Ask {
        entries: vec![Destination::parse("*.asked.test").unwrap()],
        any: false,
    };
    let host = ["45.45.45.45".parse().unwrap()];
    let rules = Rules {
        egress: &egress,
        host_addresses: &host,
        ask: Some(&ask),
    };
    // Whatever the sandbox put in the name would reach the zone's nameserver: not looked up.
    let attempt = tcp("198.18.0.9:443", Some("c2VjcmV0.asked.test"));
    let (answer, event) = decide(&attempt, rules, no_lookup);
    assert_eq!(
        answer,
        Answer::AskFirst("c2VjcmV0.asked.test".into(), "*.asked.test".into())
    );
    let event = event.unwrap();
    assert!(!event.allowed && event.ip.is_none(), "{event:?}");
    // A yes: looked up then, and an address no approval opens is refused all the same.
    let yes = || crate::rules::Decision {
        allowed: true,
        rule: "allowed by a test".into(),
    };
    for protected in ["10.1.2.3", "127.0.0.1", "169.254.169.254", "45.45.45.45"] {
        let (decision, _) = rules.after_approval(
            "c2VjcmV0.asked.test",
            443,
            yes(),
            host_says(protected, false),
        );
        assert!(!decision.allowed, "{protected}: {}", decision.rule);
    }
    let (decision, addr) = rules.after_approval(
        "c2VjcmV0.asked.test",
        443,
        yes(),
        host_says("140.82.112.3", false),
    );
    assert!(decision.allowed, "{}", decision.rule);
    assert_eq!(addr, Some(at("140.82.112.3:443")));
    // A name the profile allows is not put to anyone first.
    let (answer, _) = decide(
        &tcp("198.18.0.1:443", Some("github.com")),
        rules,
        host_says("140.82.112.3", false),
    );
    assert!(matches!(answer, Answer::Relay(_)), "{answer:?}");
}
