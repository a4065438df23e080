//! The session CA: made when the injector is, its key only in this process's memory (never
//! written), valid for a short while, constrained to the session's hosts; and the leaf
//! certificate of each host, made on demand and kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SerialNumber,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// How long the CA and its leaves are valid: a session's life, not a year.
const VALIDITY: time::Duration = time::Duration::days(30);

/// A leaf certificate chain and its key, for rustls.
pub(super) type Leaf = (Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>);

/// A session's CA. Made on its own before the sandbox is (its certificate goes into the
/// sandbox's trust store), then given to [`super::Injector::with_ca`] with the secrets.
pub struct SessionCa {
    /// The names it may vouch for (its name constraints), lowercase.
    hosts: Vec<String>,
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
    pem: String,
    leaves: Mutex<HashMap<String, Leaf>>,
}

/// `n` random bytes from ring, through rustls's provider.
fn random<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(bytes)
}

/// From an hour ago (clocks differ) to [`VALIDITY`] on.
fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + VALIDITY;
}

impl SessionCa {
    /// A fresh CA for certificates of `hosts` only (name constraints).
    pub fn new(hosts: &[String]) -> Result<SessionCa, String> {
        let cant = |e: rcgen::Error| format!("cannot make the session CA: {e}");
        let key = KeyPair::generate().map_err(cant)?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("airlock session CA {}", hex::encode(random::<8>()?)),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(SerialNumber::from_slice(&random::<16>()?));
        validity(&mut params);
        if !hosts.is_empty() {
            // Even a leaked key of this CA could not vouch for another host. Constraints hold
            // per type of name: DNS names alone would leave every address free.
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: hosts
                    .iter()
                    .map(|h| GeneralSubtree::DnsName(h.clone()))
                    .collect(),
                excluded_subtrees: vec![
                    GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                    GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
                ],
            });
        }
        let cert = params.self_signed(&key).map_err(cant)?;
        Ok(SessionCa {
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// Its certificate, PEM: what the sandbox's trust store gets.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// May it vouch for `host` (one of its name constraints)?
    pub(super) fn covers(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// The leaf certificate (chain: leaf, CA) and key for `host`, made the first time.
    pub(super) fn leaf(&self, host: &str) -> Result<Leaf, String> {
        let host = host.to_ascii_lowercase();
        let mut leaves = self
            .leaves
            .lock()
            .map_err(|_| "the leaf certificate cache is poisoned".to_string())?;
        if let Some(leaf) = leaves.get(&host) {
            return Ok(leaf.clone());
        }
        let cant = |e: rcgen::Error| format!("cannot make a certificate for {host}: {e}");
        let key = KeyPair::generate().map_err(cant)?;
        let mut params = CertificateParams::new(vec![host.clone()]).map_err(cant)?;
        params
            .distinguished_name
            .push(DnType::CommonName, host.clone());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(SerialNumber::from_slice(&random::<16>()?));
        validity(&mut params);
        let cert = params.signed_by(&key, &self.issuer).map_err(cant)?;
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let leaf: Leaf = (
            vec![cert.der().clone(), self.der.clone()],
            Arc::new(private),
        );
        leaves.insert(host, leaf.clone());
        Ok(leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    /// A leaf this CA signs for `names` (DNS names or addresses), bypassing [`SessionCa::leaf`]
    /// as a leaked key would.
    fn signed(ca: &SessionCa, names: &[&str]) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params);
        params.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    fn verifies(ca: &SessionCa, leaf: &CertificateDer<'static>, name: &str) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der.clone()).unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(leaf, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn the_cas_name_constraints_hold_for_any_leaf_it_signs() {
        let ca = SessionCa::new(&["api.test".to_string()]).unwrap();
        let (chain, _) = ca.leaf("api.test").unwrap();
        assert!(verifies(&ca, &chain[0], "api.test"));
        for other in ["evil.test", "test", "api.test.evil"] {
            let leaf = signed(&ca, &[other]);
            assert!(!verifies(&ca, &leaf, other), "a leaf for {other} verified");
        }
        // Names constraints are per name type: one for DNS names only leaves addresses free.
        for address in ["127.0.0.1", "::1"] {
            let leaf = signed(&ca, &[address]);
            assert!(
                !verifies(&ca, &leaf, address),
                "a leaf for {address} verified"
            );
        }
    }
}
