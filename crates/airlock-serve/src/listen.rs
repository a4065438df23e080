//! Where the server listens, and with what: a unix socket (default, mode 0600), or a TCP address
//! (TLS required beyond loopback, so that a token never crosses a network in clear text).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tokio_rustls::rustls;

use crate::activation::{Passed, PassedAddress};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl Listen {
    /// `unix:PATH`, an absolute path, or `HOST:PORT` (an IP address; `localhost` is 127.0.0.1).
    pub fn parse(text: &str) -> Result<Listen> {
        if let Some(path) = text.strip_prefix("unix:") {
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if text.starts_with('/') {
            return Ok(Listen::Unix(PathBuf::from(text)));
        }
        let text = text.replace("localhost:", "127.0.0.1:");
        text.parse().map(Listen::Tcp).with_context(|| {
            format!("--listen {text:?}: give unix:PATH, an absolute socket path, or IP:PORT (127.0.0.1:8700, [::1]:8700)")
        })
    }
}

/// Certificate and key files (PEM) for TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The TLS configuration of the server, from PEM files.
pub fn tls_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>> {
    let certs = read_pem(&files.cert, "--tls-cert", |reader| {
        rustls_pemfile::certs(reader).collect::<Result<Vec<_>, _>>()
    })?;
    if certs.is_empty() {
        bail!(
            "--tls-cert {}: no certificate in it (PEM, 'BEGIN CERTIFICATE')",
            files.cert.display()
        );
    }
    let key =
        read_pem(&files.key, "--tls-key", rustls_pemfile::private_key)?.with_context(|| {
            format!(
                "--tls-key {}: no private key in it (PEM: PKCS#8, PKCS#1 or SEC1)",
                files.key.display()
            )
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| {
            format!(
                "--tls-cert {} and --tls-key {} do not make a usable pair",
                files.cert.display(),
                files.key.display()
            )
        })?;
    Ok(Arc::new(config))
}

fn read_pem<T>(
    path: &Path,
    arg: &str,
    parse: impl FnOnce(&mut dyn std::io::BufRead) -> std::io::Result<T>,
) -> Result<T> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("{arg} {}: cannot open it", path.display()))?;
    parse(&mut std::io::BufReader::new(file))
        .with_context(|| format!("{arg} {}: not PEM", path.display()))
}

/// How a TCP listener's requests travel: TLS, or clear text, which beyond loopback needs the
/// operator's explicit acceptance (`--allow-clear-text`).
#[derive(Debug, Clone, Copy)]
pub struct WireSecurity {
    pub tls: bool,
    pub clear_text_allowed: bool,
}

impl WireSecurity {
    /// Whether requests to `addr` may come in as this says.
    fn allows(self, addr: &std::net::SocketAddr) -> bool {
        self.tls || self.clear_text_allowed || addr.ip().is_loopback()
    }
}

/// Refuse to send tokens in clear text beyond this machine, unless the operator accepted it.
pub fn check_clear_text(listen: &Listen, wire: WireSecurity) -> Result<()> {
    if let Listen::Tcp(addr) = listen {
        if !wire.allows(addr) {
            bail!("--listen {addr}: not a loopback address, and no TLS: tokens would cross the network in clear text — give --tls-cert and --tls-key, or listen on 127.0.0.1 or a unix socket (or, where that network is the server's and its one client's alone, as a pod's behind agent-sandbox's router, accept it with --allow-clear-text)");
        }
    }
    Ok(())
}

/// Where the server's connections come from: a socket it binds, or one systemd bound for it.
#[derive(Debug)]
pub enum Source {
    Bind(Listen),
    Passed(Passed),
}

/// The socket systemd passed, if any, else `--listen`, else the default unix socket. With both a
/// passed socket and `--listen` (a unit that names its socket for when it is started without its
/// `.socket` unit), they must be the same address. A passed TCP socket beyond loopback is refused
/// without TLS, as `--listen` is.
pub fn choose_source(
    listen: Option<Listen>,
    passed: Option<Passed>,
    default: PathBuf,
    wire: WireSecurity,
) -> Result<Source> {
    let Some(passed) = passed else {
        let listen = listen.unwrap_or(Listen::Unix(default));
        check_clear_text(&listen, wire)?;
        return Ok(Source::Bind(listen));
    };
    let address = passed.address()?;
    if let Some(listen) = listen {
        let same = match (&listen, &address) {
            (Listen::Unix(wanted), PassedAddress::Unix(Some(got))) => wanted == got,
            (Listen::Tcp(wanted), PassedAddress::Tcp(got)) => wanted == got,
            _ => false,
        };
        if !same {
            bail!("systemd passed a socket on {address} (LISTEN_FDS), but --listen says {}: drop --listen, or make the .socket unit's ListenStream= the same address", shown(&listen));
        }
    }
    if let PassedAddress::Tcp(addr) = address {
        if !wire.allows(&addr) {
            bail!("the socket systemd passed (LISTEN_FDS) listens on {addr}: not a loopback address, and no TLS: tokens would cross the network in clear text — give --tls-cert and --tls-key, or make the .socket unit's ListenStream= 127.0.0.1:PORT or a unix socket path");
        }
    }
    Ok(Source::Passed(passed))
}

fn shown(listen: &Listen) -> String {
    match listen {
        Listen::Unix(path) => format!("unix:{}", path.display()),
        Listen::Tcp(addr) => addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAR: WireSecurity = WireSecurity {
        tls: false,
        clear_text_allowed: false,
    };
    const TLS: WireSecurity = WireSecurity {
        tls: true,
        clear_text_allowed: false,
    };
    const ACCEPTED: WireSecurity = WireSecurity {
        tls: false,
        clear_text_allowed: true,
    };

    #[test]
    fn addresses() {
        assert_eq!(
            Listen::parse("/run/a.sock").unwrap(),
            Listen::Unix("/run/a.sock".into())
        );
        assert_eq!(
            Listen::parse("unix:a.sock").unwrap(),
            Listen::Unix("a.sock".into())
        );
        assert_eq!(
            Listen::parse("localhost:80").unwrap(),
            Listen::Tcp("127.0.0.1:80".parse().unwrap())
        );
        assert!(Listen::parse("example.com:80").is_err());
        let public = Listen::parse("0.0.0.0:8700").unwrap();
        assert!(check_clear_text(&public, CLEAR).is_err());
        assert!(check_clear_text(&public, TLS).is_ok());
        assert!(check_clear_text(&public, ACCEPTED).is_ok());
        assert!(check_clear_text(&Listen::parse("[::1]:1").unwrap(), CLEAR).is_ok());
    }

    fn passed_tcp(addr: &str) -> (Passed, SocketAddr) {
        let listener = std::net::TcpListener::bind(addr).unwrap();
        let bound = listener.local_addr().unwrap();
        (Passed::Tcp(listener), bound)
    }

    #[test]
    fn a_socket_from_systemd_follows_the_rules_of_listen() {
        let default = PathBuf::from("/nonexistent/airlock.sock");
        let choose = |listen, passed, tls| choose_source(listen, passed, default.clone(), tls);
        let (public, addr) = passed_tcp("0.0.0.0:0");
        let refused = choose(None, Some(public), CLEAR).unwrap_err().to_string();
        assert!(
            refused.contains(&addr.to_string()) && refused.contains("--tls-cert"),
            "{refused}"
        );
        let (public, _) = passed_tcp("0.0.0.0:0");
        assert!(matches!(
            choose(None, Some(public), TLS),
            Ok(Source::Passed(_))
        ));
        let (public, _) = passed_tcp("0.0.0.0:0");
        assert!(matches!(
            choose(None, Some(public), ACCEPTED),
            Ok(Source::Passed(_))
        ));
        let (local, addr) = passed_tcp("127.0.0.1:0");
        let same = Some(Listen::Tcp(addr));
        assert!(matches!(
            choose(same, Some(local), CLEAR),
            Ok(Source::Passed(_))
        ));
        let (local, _) = passed_tcp("127.0.0.1:0");
        let other = Some(Listen::Unix("/run/other.sock".into()));
        let refused = choose(other, Some(local), CLEAR).unwrap_err().to_string();
        assert!(
            refused.contains("--listen says unix:/run/other.sock"),
            "{refused}"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sock");
        let unix = Passed::Unix(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let same = Some(Listen::Unix(path));
        assert!(matches!(
            choose(same, Some(unix), CLEAR),
            Ok(Source::Passed(_))
        ));
        assert!(
            matches!(choose(None, None, CLEAR), Ok(Source::Bind(Listen::Unix(p))) if p == default)
        );
    }
}
