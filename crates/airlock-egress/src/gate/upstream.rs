//! Reaching the destination, from the host: the connection an allowed connect is relayed to.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use super::{lookup, NetEvent, NetEventKind, State};
use crate::rules::Decision;

/// The connection to the destination, begun while the sandbox's connect waited.
pub(super) enum Early {
    /// Connected.
    Ready(TcpStream),
    /// Still connecting (the sandbox's connect went on without waiting longer).
    Coming(Receiver<Result<TcpStream, Unreached>>),
}

/// A destination that did not take the connection: why, and the errno the program would have
/// had connecting directly.
pub(super) type Unreached = (String, i32);

/// How long one address of the destination is given to take a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connect to the destination a connection was allowed to; when that address does not take it,
/// the name's other host addresses that the rules allow too, in the resolver's order (as a
/// program connecting directly would: `::1` then `127.0.0.1`, say). A failure is an event (the
/// attempt was allowed, and then nothing answered), and its text is returned.
pub(super) fn connect(
    state: &State,
    name: Option<&str>,
    addr: SocketAddr,
) -> Result<TcpStream, Unreached> {
    let first = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
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
        .filter(|name| !lookup::overridden(state, name))
        .and_then(|name| state.lookups.get(name).ok().map(|ips| (name, ips)));
    if let Some((name, ips)) = others {
        for ip in ips.into_iter().filter(|ip| *ip != addr.ip()) {
            let other = SocketAddr::new(ip, addr.port());
            let decision = state.rules().decide(Some(name), other, false);
            if !decision.allowed {
                continue;
            }
            match TcpStream::connect_timeout(&other, CONNECT_TIMEOUT) {
                Ok(stream) => {
                    // The log names the address the connection went to, and the rule for it.
                    let decision = Decision {
                        allowed: true,
                        rule: format!("{} (after {}: {first})", decision.rule, addr.ip()),
                    };
                    let e = NetEvent::new(NetEventKind::Connect, &decision).about(
                        Some(name.to_string()),
                        Some(ip),
                        Some(addr.port()),
                    );
                    state.log(&e);
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
    let e = NetEvent::new(NetEventKind::Failed, &decision).about(
        name.map(str::to_string),
        Some(addr.ip()),
        Some(addr.port()),
    );
    state.log(&e);
    Err((why, errno))
}
