//! A run whose profile has `[[secret]]`s or `[[network.http]]` rules: the gate terminates TLS
//! for their hosts with a CA of the run's own. The CA is made before the sandbox (whose trust
//! store holds its certificate); the injector, which holds the values, once they are read (see
//! [`crate::secrets::for_run`]).

use std::sync::Arc;

use airlock_egress::inject::{Injector, Secret, SessionCa};
use airlock_jail::trust::Trust;
use airlock_policy::Profile;

use crate::error::Error;

/// The run's CA, for its profile's secrets' hosts and the hosts it has HTTP rules for; None
/// without either.
pub(super) fn session_ca(profile: &Profile) -> Result<Option<SessionCa>, Error> {
    if profile.secrets.is_empty() && profile.http.is_empty() {
        return Ok(None);
    }
    let mut hosts: Vec<String> = profile
        .secrets
        .iter()
        .flat_map(|s| s.hosts.iter().cloned())
        .chain(profile.http.iter().map(|rules| rules.host.clone()))
        .collect();
    hosts.sort();
    hosts.dedup();
    SessionCa::new(&hosts)
        .map(Some)
        .map_err(|why| Error::InjectionUnavailable { why })
}

/// What the sandbox trusts: the host's roots and the run's CA.
pub(super) fn trust(ca: &SessionCa) -> Trust {
    Trust::with_host_roots(ca.pem())
}

/// The gate's injector for the run's secrets (their values move into it) and its profile's
/// HTTP rules.
pub(super) fn injector(
    ca: SessionCa,
    secrets: Vec<Secret>,
    profile: &Profile,
) -> Result<Arc<Injector>, Error> {
    Injector::with_ca(ca, secrets)
        .and_then(|injector| injector.with_http(profile.http.clone()))
        .map(Arc::new)
        .map_err(|why| Error::InjectionUnavailable { why })
}
