//! The session CA: made when the injector is, its key only in this process's memory (never
//! written), valid for a short while, constrained to the session's hosts; and the leaf
//! certificate of each host, made on demand and kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SerialNumber,
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
            format!("airlock session CA {}", hex(&random::<8>()?)),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(SerialNumber::from_slice(&random::<16>()?));
        validity(&mut params);
        if !hosts.is_empty() {
            // Even a leaked certificate of this CA could not vouch for another host.
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: hosts
                    .iter()
                    .map(|h| GeneralSubtree::DnsName(h.clone()))
                    .collect(),
                excluded_subtrees: Vec::new(),
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
