//! The environment a sandboxed command gets: nothing of the caller's but what the profile allows.

use std::ffi::OsString;

use airlock_policy::Profile;

use crate::secrets::Placeholder;

/// The sandbox user's name and home, inside.
pub const SANDBOX_USER: &str = "agent";
pub const SANDBOX_HOME: &str = "/home/agent";
/// Package managers' retry counts, zero unless the profile's network is open.
const NO_RETRIES: [(&str, &str); 3] = [
    ("PIP_RETRIES", "0"),
    ("npm_config_fetch_retries", "0"),
    ("CARGO_NET_RETRY", "0"),
];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment the command gets: allowed variables of the caller, then the sandbox identity,
/// then the profile's values, then each secret's placeholder (last: nothing overrides it, so
/// the variable never holds what the caller passed under that name).
pub(super) fn sandbox_env(
    profile: &Profile,
    caller_env: &[(OsString, OsString)],
    placeholders: &[Placeholder],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = caller_env
        .iter()
        .filter(|(k, _)| k.to_str().is_some_and(|name| profile.env_allowed(name)))
        .cloned()
        .collect();
    let mut set = |key: &str, value: &str| {
        env.retain(|(k, _)| k != key);
        env.push((key.into(), value.into()));
    };
    // HOME is on the allowlist as a name; its value is always the sandbox's own home, since the
    // caller's home does not exist inside.
    set("HOME", SANDBOX_HOME);
    set("USER", SANDBOX_USER);
    set("LOGNAME", SANDBOX_USER);
    if !caller_env.iter().any(|(k, _)| k == "PATH") {
        set("PATH", DEFAULT_PATH);
    }
    if profile.network != airlock_policy::NetworkMode::None {
        // For tools that prefer a proxy: airlock's, behind the same gate and decisions.
        let proxy = airlock_egress::gate::PROXY_URL;
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            set(key, proxy);
        }
        for key in ["NO_PROXY", "no_proxy"] {
            set(key, "localhost,127.0.0.1,::1");
        }
    }
    if !matches!(profile.network, airlock_policy::NetworkMode::Open { .. }) {
        // What the gate refuses stays refused, so a tool's retries only wait: pip retries a
        // refused lookup or proxy request five times (~8 s), cargo three (~11 s), npm a refused
        // lookup twice (~70 s). The person reads why at once instead. (A profile that wants
        // retries for its allowed hosts sets these in [env] set.)
        for (key, value) in NO_RETRIES {
            set(key, value);
        }
    }
    for (key, value) in &profile.env.set {
        set(key, value);
    }
    if !placeholders.is_empty() {
        // The gate terminates TLS for the secrets' hosts with the run's CA: programs with a
        // store of their own are told where the sandbox's trust store is (the system's bundle
        // already is it; see airlock_jail::trust). After the profile's values: a bundle the
        // profile names would lack the CA, and the secrets' hosts would fail to verify.
        let bundle = airlock_jail::trust::TRUST_BUNDLE;
        for key in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
        ] {
            set(key, bundle);
        }
        // Node adds these to its own roots.
        set("NODE_EXTRA_CA_CERTS", airlock_jail::trust::TRUST_CA);
    }
    for secret in placeholders {
        set(&secret.name, &secret.placeholder);
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn env_keeps_only_the_allowlist_and_sets_identity() {
        let mut profile = Profile::builtin_default();
        profile.env.set.insert("RUST_LOG".into(), "info".into());
        let env = sandbox_env(
            &profile,
            &pairs(&[
                ("PATH", "/usr/bin"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
                ("LC_ALL", "C"),
                ("HOME", "/root"),
            ]),
            &[],
        );
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.to_str().unwrap().to_string())
        };
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(get("LC_ALL").as_deref(), Some("C"));
        assert_eq!(get("HOME").as_deref(), Some(SANDBOX_HOME));
        assert_eq!(get("RUST_LOG").as_deref(), Some("info"));
    }

    #[test]
    fn a_secret_holds_its_placeholder_whatever_else_sets_it() {
        let mut profile = Profile::builtin_default();
        profile.env.allow.push("GITHUB_TOKEN".into());
        let secret = Placeholder {
            name: "GITHUB_TOKEN".into(),
            placeholder: "ghp_AiRloCk".into(),
        };
        let env = sandbox_env(&profile, &pairs(&[("GITHUB_TOKEN", "ghp_real")]), &[secret]);
        let tokens: Vec<_> = env.iter().filter(|(k, _)| k == "GITHUB_TOKEN").collect();
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens[0].1, "ghp_AiRloCk");
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        assert_eq!(
            get("SSL_CERT_FILE"),
            Some(airlock_jail::trust::TRUST_BUNDLE.into())
        );
        assert_eq!(
            get("NODE_EXTRA_CA_CERTS"),
            Some(airlock_jail::trust::TRUST_CA.into())
        );
        assert_eq!(
            env.last().map(|(k, _)| k.clone()),
            Some("GITHUB_TOKEN".into())
        );
    }
}
