//! Names looked up on the host: the host resolver's answers, kept for a short while, and the
//! user's own `--resolve` mappings before them.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::State;

/// The host resolver's answers, kept for a short while: a name is looked up when the sandbox
/// asks the gate's DNS for it (the program's resolver waits then, off its event loop), and its
/// connects right after use that answer instead of waiting for another lookup while `connect`
/// is held. One lookup at a time per name; failures are kept for less long.
#[derive(Default)]
pub(super) struct HostLookups(Mutex<HashMap<String, Arc<Mutex<Option<Looked>>>>>);

type Looked = (Result<Vec<IpAddr>, String>, Instant);

/// How long an answer of the host's resolver is used, found and not found.
const LOOKUP_KEPT: Duration = Duration::from_secs(30);
const LOOKUP_FAILURE_KEPT: Duration = Duration::from_secs(5);

impl HostLookups {
    pub(super) fn get(&self, name: &str) -> Result<Vec<IpAddr>, String> {
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

/// Did the user map `name` to an address themselves (`--resolve`)?
pub(super) fn overridden(state: &State, name: &str) -> bool {
    state.config.resolve.iter().any(|(n, _)| n == name)
}

/// Resolve `name` on the host (or by the user's override): the address to connect to, and
/// whether it came from the override.
pub(super) fn resolve(state: &State, name: &str, port: u16) -> io::Result<(SocketAddr, bool)> {
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
