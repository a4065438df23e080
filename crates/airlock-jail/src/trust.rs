//! Certificates a sandbox trusts beyond the host's. When the gate terminates TLS for a profile's
//! secrets (airlock-egress `inject`), the run's own CA must be trusted inside, and only inside:
//! the CA and a bundle (the host's roots followed by the CA) are written into the new root
//! (read-only once sealed), and the bundle is bound over the distribution's bundle files so that
//! programs reading the system store find it without being told. Programs with their own store
//! are told through the variables core sets (`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`…).
//!
//! Not covered: lookups in the hashed directory (`/etc/ssl/certs/<hash>.0`, OpenSSL's CApath),
//! which stays the host's.

use std::path::{Path, PathBuf};

/// Where the run's CA certificate is, inside (for `NODE_EXTRA_CA_CERTS`, which adds to Node's
/// own roots).
pub const TRUST_CA: &str = "/run/airlock/ca.pem";
/// Where the host's roots followed by the run's CA are, inside (for `SSL_CERT_FILE` and the
/// variables that replace a program's roots).
pub const TRUST_BUNDLE: &str = "/run/airlock/ca-bundle.pem";

/// The distributions' bundle files, each under a directory the sandbox sees live (`etc`'s
/// `ETC_BOUND`): Debian and Ubuntu, Fedora and RHEL.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// What the sandbox trusts besides the host's roots.
#[derive(Clone, PartialEq, Eq)]
pub struct Trust {
    /// The run's CA certificate (PEM).
    pub ca_pem: String,
    /// The host's roots, then the CA (PEM): see [`Trust::with_host_roots`].
    pub bundle_pem: String,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("bundle_pem_bytes", &self.bundle_pem.len())
            .finish()
    }
}

impl Trust {
    /// Trust `ca_pem` in addition to the host's roots: the first of [`SYSTEM_BUNDLES`] that is a
    /// readable file on the host, or none (then the bundle holds only the CA, and hosts without
    /// secrets cannot be verified by programs pointed at it: say so).
    pub fn with_host_roots(ca_pem: &str) -> Trust {
        let host = SYSTEM_BUNDLES
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        let mut bundle_pem = host;
        if !bundle_pem.is_empty() && !bundle_pem.ends_with('\n') {
            bundle_pem.push('\n');
        }
        bundle_pem
            .push_str("# airlock: this run's CA, for the hosts its secrets are injected for\n");
        bundle_pem.push_str(ca_pem);
        Trust {
            ca_pem: ca_pem.to_string(),
            bundle_pem,
        }
    }
}

/// The files the plan writes into the new root for `trust`: (path inside, contents).
pub(crate) fn files(trust: &Trust) -> [(PathBuf, String); 2] {
    [
        (PathBuf::from(TRUST_CA), trust.ca_pem.clone()),
        (PathBuf::from(TRUST_BUNDLE), trust.bundle_pem.clone()),
    ]
}

/// The directory the trust files are in, inside.
pub(crate) fn dir() -> &'static Path {
    Path::new("/run/airlock")
}
