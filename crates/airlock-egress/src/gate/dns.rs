//! Answering the sandbox's DNS queries: an allowed name gets the synthetic addresses that stand
//! for it (once the host could resolve it), any other NXDOMAIN. Nothing is forwarded.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{cut_decision, deny, lookup, NetEvent, NetEventKind, State};
use crate::dns::{self, Query};
use crate::rules::Decision;

/// Host lookups for DNS queries at once, at most; past that, queries are answered without one
/// (their connect then looks the name up).
const MAX_LOOKUPS_RUNNING: usize = 64;

pub(super) fn serve(socket: UdpSocket, state: Arc<State>) {
    let socket = Arc::new(socket);
    let mut buf = [0u8; 1500];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            return;
        };
        let Some(query) = dns::parse_query(&buf[..len]) else {
            continue;
        };
        let decision = if state.is_cut() {
            cut_decision()
        } else {
            state.config.egress.may_resolve(&query.name)
        };
        // An allowed name the user did not --resolve is looked up on the host before it is
        // answered, on a thread of its own: the program's resolver waits, not its connect.
        let look_up_first = decision.allowed
            && matches!(query.qtype, dns::TYPE_A | dns::TYPE_AAAA)
            && !lookup::overridden(&state, &query.name)
            && state
                .lookups_running
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < MAX_LOOKUPS_RUNNING).then_some(n + 1)
                })
                .is_ok();
        if look_up_first {
            let (socket, state) = (socket.clone(), state.clone());
            std::thread::spawn(move || {
                let decision = match state.lookups.get(&query.name) {
                    Ok(_) => decision,
                    Err(e) => deny(format!("the host cannot resolve {}: {e}", query.name)),
                };
                answer(&socket, &state, &query, &decision, from);
                state.lookups_running.fetch_sub(1, Ordering::SeqCst);
            });
        } else {
            answer(&socket, &state, &query, &decision, from);
        }
    }
}

/// Answer one DNS query as `decision` says, and log it.
fn answer(socket: &UdpSocket, state: &State, query: &Query, decision: &Decision, from: SocketAddr) {
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
    state.log(&e);
    let _ = socket.send_to(&reply, from);
}
