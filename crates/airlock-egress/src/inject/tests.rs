//! The injector's CA and secrets (the serving half is not on this branch yet).

use super::*;

fn secret(hosts: &[&str], inject: Inject) -> Secret {
    Secret {
        name: "GITHUB_TOKEN".into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        placeholder: "ghp_airlockPLACEHOLDER".into(),
        value: zeroize::Zeroizing::new("ghp_realVALUEthatmustnotshow".into()),
        inject,
    }
}

#[test]
fn a_secrets_value_is_not_in_its_debug_output() {
    let s = secret(&["api.github.com"], Inject::Placeholder);
    let shown = format!("{s:?}");
    assert!(!shown.contains("realVALUE"), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

#[test]
fn the_ca_is_fresh_and_leaves_are_made_once_per_host() {
    let secrets = vec![secret(&["api.github.com"], Inject::Placeholder)];
    let a = Injector::with_roots(secrets, RootCertStore::empty()).unwrap();
    let b = Injector::with_roots(Vec::new(), RootCertStore::empty()).unwrap();
    assert!(a.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert_ne!(a.ca_pem(), b.ca_pem());
    assert!(a.intercepts("API.github.com"));
    assert!(!a.intercepts("github.com"));
    let first = a.ca.leaf("api.github.com").unwrap();
    let again = a.ca.leaf("Api.GitHub.com").unwrap();
    assert_eq!(first.0, again.0, "cached");
    assert_eq!(first.0.len(), 2, "leaf then CA");
}
