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
    let Some(sockaddr) = relay_sockaddr(dest.is_ipv6(), relay, relay_address(id), call.addr_len())
    else {
        return call.fail(libc::EINVAL);
    };
    call.write_addr(&sockaddr)?;
    call.pass()
}

/// The sockaddr that points a connect at the relay's `port` on `ip`, in the family of the
/// connect's own address (IPv4-mapped for an IPv6 socket) and in the `given` length of that
/// address; None when that is too short for its family.
fn relay_sockaddr(v6: bool, port: u16, ip: Ipv4Addr, given: usize) -> Option<Vec<u8>> {
    let mut sockaddr = Vec::with_capacity(28);
    if v6 {
        sockaddr.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        sockaddr.extend_from_slice(&port.to_be_bytes());
        sockaddr.extend_from_slice(&[0; 4]); // flow info
        sockaddr.extend_from_slice(&ip.to_ipv6_mapped().octets());
        sockaddr.extend_from_slice(&[0; 4]); // scope id
    } else {
        sockaddr.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        sockaddr.extend_from_slice(&port.to_be_bytes());
        sockaddr.extend_from_slice(&ip.octets());
        sockaddr.extend_from_slice(&[0; 8]);
    }
    // An IPv6 address may come in the 24 bytes of RFC 2133 (no scope id), which the kernel
    // accepts; the relay's address (scope id 0) is written in as many bytes as were given.
    let least = if v6 { 24 } else { 16 };
    if given < least {
        return None;
    }
    sockaddr.truncate(given);
    Some(sockaddr)
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

    #[test]
    fn the_relay_sockaddr_keeps_the_family_and_length_given() {
        let ip = Ipv4Addr::new(127, 64, 0, 7);
        let v4 = relay_sockaddr(false, 0x1234, ip, 16).unwrap();
        assert_eq!(v4.len(), 16);
        assert_eq!(&v4[..2], &(libc::AF_INET as u16).to_ne_bytes());
        assert_eq!(&v4[2..8], &[0x12, 0x34, 127, 64, 0, 7]);
        let v6 = relay_sockaddr(true, 0x1234, ip, 28).unwrap();
        assert_eq!(v6.len(), 28);
        assert_eq!(&v6[..2], &(libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(&v6[8..24], &ip.to_ipv6_mapped().octets());
        // RFC 2133's 24 bytes: no scope id.
        assert_eq!(relay_sockaddr(true, 0x1234, ip, 24).unwrap(), v6[..24]);
        // More than the family's length is written as the family's length.
        assert_eq!(relay_sockaddr(false, 0x1234, ip, 128).unwrap(), v4);
        assert_eq!(relay_sockaddr(false, 1, ip, 15), None);
        assert_eq!(relay_sockaddr(true, 1, ip, 23), None);
    }
}
