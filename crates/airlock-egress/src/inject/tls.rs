//! Both TLS ends of an intercepted connection: the sandbox's, terminated with the session CA's
//! leaf for the host (the hello the relay already read comes first), and the upstream one,
//! verified against the injector's roots.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::ca::Leaf;

pub(super) const H2: &[u8] = b"h2";
pub(super) const HTTP11: &[u8] = b"http/1.1";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Bytes that went each way on the sandbox's side.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) from_client: AtomicU64,
    pub(super) to_client: AtomicU64,
}

/// The sandbox's socket, with the bytes the relay read from it first put back in front.
pub(super) struct Client {
    first: Vec<u8>,
    at: usize,
    socket: TcpStream,
    counts: Arc<Counts>,
}

impl Client {
    pub(super) fn new(first: Vec<u8>, socket: TcpStream, counts: Arc<Counts>) -> Client {
        counts
            .from_client
            .fetch_add(first.len() as u64, Ordering::Relaxed);
        Client {
            first,
            at: 0,
            socket,
            counts,
        }
    }
}

impl AsyncRead for Client {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.first.len() {
            let n = buf.remaining().min(this.first.len() - this.at);
            buf.put_slice(&this.first[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.socket).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        this.counts.from_client.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Client {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.socket).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            this.counts
                .to_client
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

/// The sandbox side's TLS settings: the host's leaf, and the application protocols `alpn`.
pub(super) fn terminating(leaf: Leaf, alpn: Vec<Vec<u8>>) -> Result<Arc<ServerConfig>, String> {
    let (chain, key) = leaf;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS towards the sandbox: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key.clone_key())
        .map_err(|e| format!("cannot set up TLS towards the sandbox: {e}"))?;
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}

/// Connect TLS to `host` over `tcp`, verifying its certificate against `roots`, offering the
/// application protocols `alpn`. Err: why (in rustls's words), for the log and the client.
pub(super) async fn connect_upstream(
    tcp: TcpStream,
    host: &str,
    roots: Arc<RootCertStore>,
    alpn: Vec<Vec<u8>>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS to {host}: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn;
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host} is not a name TLS can verify: {e}"))?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(rustls::Error::InvalidCertificate(why)) => {
                    format!("the upstream certificate of {host} did not verify: {why}")
                }
                Some(other) => format!("TLS with the upstream server {host} failed: {other}"),
                None => format!("TLS with the upstream server {host} failed: {e}"),
            }
        })
}
