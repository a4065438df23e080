//! Handing an allowed connect to the relay: the sandbox's own socket connects, in its own
//! namespace, to the relay at an address that says which target this is. The connect's address
//! is rewritten, then the kernel runs it; whatever the process does to that memory meanwhile
//! only reaches its own namespace.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::connect::Held;
use super::relay::Target;
use super::upstream::Early;
use super::{NetEventKind, State};

/// A connect sent on to the relay, not yet accepted there.
pub(super) struct Pending {
    pub(super) target: Target,
    pub(super) since: Instant,
    pub(super) early: Option<Early>,
}

/// How many relay addresses there are (127.64.0.0/10).
const RELAY_IDS: u32 = 1 << 22;
/// How long a connect sent to the relay may take to arrive there; an entry older is dropped.
pub(super) const STALE: Duration = Duration::from_secs(10);
const RELAY_BASE: Ipv4Addr = Ipv4Addr::new(127, 64, 0, 0);

/// Send the sandbox's connect to the relay, at the address that names `target`.
pub(super) fn hand_over(
    state: &State,
    relay: u16,
    call: &impl Held,
    dest: SocketAddr,
    target: Target,
    early: Option<Early>,
) -> io::Result<()> {
    let id = state.next_pending.fetch_add(1, Ordering::SeqCst) % RELAY_IDS;
    if let Ok(mut pending) = state.pending.lock() {
        // A connect the kernel then failed never reaches the relay: its entry is dropped once
        // it is surely stale. Until then it counts toward the bound on connections, with those
        // open, so that a sandbox cannot grow the table (or what its entries hold) without end.
        pending.retain(|_, entry| entry.since.elapsed() < STALE);
        let open = state.open.lock().map_or(0, |open| open.len());
        if open + pending.len() >= state.max_open {
            drop(pending);
            state.log(&target.event(NetEventKind::Connect, &state.too_many()));
            return call.fail(libc::EAGAIN);
        }
        let since = Instant::now();
        pending.insert(
            id,
            Pending {
                target,
                since,
                early,
            },
        );
    }
    // An address shorter than its family's the kernel refuses (an IPv6 one may come in the 24
    // bytes of RFC 2133, without a scope id).
    let least = if dest.is_ipv6() { 24 } else { 16 };
    if call.addr_len() < least {
        return call.fail(libc::EINVAL);
    }
    call.connect_to(relay_socket_address(
        dest.is_ipv6(),
        relay,
        relay_address(id),
    ))
}

/// The relay's `port` on `ip`, in the family of the connect's own address (IPv4-mapped for an
/// IPv6 socket).
fn relay_socket_address(v6: bool, port: u16, ip: Ipv4Addr) -> SocketAddr {
    match v6 {
        true => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), port),
        false => SocketAddr::new(IpAddr::V4(ip), port),
    }
}

/// The relay address for pending connection `id`: 127.64.0.0 + id.
fn relay_address(id: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(RELAY_BASE) + (id % RELAY_IDS))
}

/// The pending id of a relay address, if it is one.
pub(super) fn relay_id(addr: IpAddr) -> Option<u32> {
    match crate::ip::canonical(addr) {
        IpAddr::V4(v4) => u32::from(v4)
            .checked_sub(u32::from(RELAY_BASE))
            .filter(|id| *id < RELAY_IDS),
        IpAddr::V6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_addresses_name_their_pending_id() {
        for id in [0, 1, 4242, RELAY_IDS - 1] {
            assert_eq!(relay_id(IpAddr::V4(relay_address(id))), Some(id));
            let mapped = IpAddr::V6(relay_address(id).to_ipv6_mapped());
            assert_eq!(relay_id(mapped), Some(id));
        }
        assert_eq!(relay_address(RELAY_IDS), relay_address(0));
        assert_eq!(relay_id("127.0.0.1".parse().unwrap()), None);
        assert_eq!(relay_id("127.128.0.0".parse().unwrap()), None);
        assert_eq!(relay_id("::1".parse().unwrap()), None);
    }
}
