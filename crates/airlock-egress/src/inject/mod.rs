//! Secrets the sandbox can use but never see (issue 17): for a host the profile holds a secret
//! for, the gate terminates the sandbox's TLS with a per-session CA, connects upstream with
//! real certificate verification, and puts the secret into the requests it passes on. The same
//! for a host with `[[network.http]]` rules (issue 28): each request is let through or refused
//! by its method and path, and recorded.
//!
//! - `secret.rs`: what a secret is and how it goes into a request ([`Secret`], [`Inject`]).
//! - `ca.rs`: the session CA (its key only in memory) and the leaf certificate of each host.
//! - `serve.rs`: one intercepted connection served ([`Injector::serve`]): both TLS ends
//!   (`tls.rs`), then request by request over hyper, each checked and given its secrets
//!   (`request.rs`, pure).

mod ca;
mod request;
mod secret;
mod serve;
mod tls;

use std::sync::Arc;

use airlock_rules::HttpRules;
use rustls::RootCertStore;

pub use ca::SessionCa;
pub use secret::{Inject, Secret};
pub use serve::Served;

/// The injecting engine of one session: its secrets, its CA, and the roots it verifies
/// upstream servers by.
pub struct Injector {
    secrets: Arc<[Secret]>,
    /// The hosts whose requests are read and decided by method and path.
    http: Arc<[HttpRules]>,
    ca: ca::SessionCa,
    /// Upstream servers are verified against these (the system's, or a test's).
    roots: Arc<RootCertStore>,
}

impl Injector {
    /// An injector for `secrets`, with a fresh session CA, verifying upstream servers by the
    /// system's roots (see [`system_roots`]).
    pub fn new(secrets: Vec<Secret>) -> Result<Injector, String> {
        Injector::with_roots(secrets, system_roots()?)
    }

    /// [`Injector::new`], verifying upstream servers by `roots` only.
    pub fn with_roots(secrets: Vec<Secret>, roots: RootCertStore) -> Result<Injector, String> {
        let hosts: Vec<String> = secrets.iter().flat_map(|s| s.hosts.clone()).collect();
        Injector::with_ca_and_roots(SessionCa::new(&hosts)?, secrets, roots)
    }

    /// An injector for `secrets` with a CA made beforehand, verifying upstream servers by the
    /// system's roots: a run makes its CA before its sandbox (whose trust store holds the
    /// CA's certificate) and reads the secrets' values only once the sandbox's first process
    /// has been forked, so that no copy of a value is in it.
    pub fn with_ca(ca: SessionCa, secrets: Vec<Secret>) -> Result<Injector, String> {
        Injector::with_ca_and_roots(ca, secrets, system_roots()?)
    }

    fn with_ca_and_roots(
        ca: SessionCa,
        secrets: Vec<Secret>,
        roots: RootCertStore,
    ) -> Result<Injector, String> {
        // A host the CA may not vouch for would get a leaf every client refuses.
        if let Some(host) = secrets
            .iter()
            .flat_map(|s| s.hosts.iter())
            .find(|host| !ca.covers(host))
        {
            return Err(format!(
                "the session CA was made without {host}, a host of a secret"
            ));
        }
        Ok(Injector {
            ca,
            secrets: secrets.into(),
            http: Arc::new([]),
            roots: Arc::new(roots),
        })
    }

    /// The same injector, reading the requests to `http`'s hosts too and deciding each by
    /// their rules (the session CA must have been made for those hosts).
    pub fn with_http(mut self, http: Vec<HttpRules>) -> Result<Injector, String> {
        if let Some(rules) = http.iter().find(|rules| !self.ca.covers(&rules.host)) {
            return Err(format!(
                "the session CA was made without {}, a host of [[network.http]]",
                rules.host
            ));
        }
        self.http = http.into();
        Ok(self)
    }

    /// The session CA's certificate, PEM: what the sandbox's trust store gets.
    pub fn ca_pem(&self) -> &str {
        self.ca.pem()
    }

    /// Does a connection to `host` get terminated here (some secret is for it, or it has
    /// `[[network.http]]` rules)?
    pub fn intercepts(&self, host: &str) -> bool {
        self.secrets.iter().any(|s| s.is_for(host)) || self.http_rules(host).is_some()
    }

    /// The `[[network.http]]` rules of `host`, if it has any: its requests must be read (a
    /// connection to it that is not TLS is refused).
    pub fn http_rules(&self, host: &str) -> Option<&HttpRules> {
        self.http
            .iter()
            .find(|rules| rules.host.eq_ignore_ascii_case(host))
    }
}

/// The system's roots, by rustls-native-certs: `SSL_CERT_FILE` / `SSL_CERT_DIR` of this process
/// are honoured, as for a corporate CA or a test's. None found is an error, not an injector
/// that can verify nothing.
pub fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "no trusted root certificates found to verify upstream servers by ({}); set SSL_CERT_FILE or SSL_CERT_DIR to the system's bundle",
            if why.is_empty() {
                "none in the system's store".to_string()
            } else {
                why.join("; ")
            }
        ));
    }
    Ok(roots)
}

#[cfg(test)]
mod http_rules_tests;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
