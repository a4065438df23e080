//! A secret, as the gate holds it: its name, its hosts, its placeholder, its value (zeroed
//! when dropped, never printed) and how it goes into a request.

use std::fmt;

use zeroize::Zeroizing;

/// How a secret goes into a request to one of its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inject {
    /// The header `name` set to `format` with `{}` replaced by the value, on every request.
    Header { name: String, format: String },
    /// `Authorization: Basic base64(username:value)`, on every request.
    Basic { username: String },
    /// The request target's query parameter `param` set to the value, on every request.
    Query { param: String },
    /// The placeholder replaced by the value where credentials travel: in `Authorization`
    /// (also inside a decoded `Basic`), `Proxy-Authorization`, `Cookie`, and the headers
    /// named here (lowercase). Nowhere else: a header such as `X-Request-Id` or `Origin` is
    /// one a server may echo back, and the sandbox would read the value in the answer.
    Placeholder { headers: Vec<String> },
}

impl Inject {
    /// Placeholder mode in the credential headers only.
    pub fn placeholder() -> Inject {
        Inject::Placeholder {
            headers: Vec::new(),
        }
    }
}

/// One secret of a session.
pub struct Secret {
    /// The variable the sandbox sees (holding the placeholder).
    pub name: String,
    /// The hosts it is for, lowercase names.
    pub hosts: Vec<String>,
    /// What the sandbox holds instead of the value.
    pub placeholder: String,
    pub value: Zeroizing<String>,
    pub inject: Inject,
}

impl Secret {
    /// Is this secret for `host` (case-blind, as DNS names are)?
    pub fn is_for(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }
}

/// By hand: the value never appears.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("placeholder", &self.placeholder)
            .field("value", &"<redacted>")
            .field("inject", &self.inject)
            .finish()
    }
}
