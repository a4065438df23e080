//! The network gate: DNS answers, the sandbox's connects held and decided, relaying, and the
//! readers of what a TLS ClientHello or an HTTP request says it is for. What a profile allows
//! is `airlock-rules`' (re-exported here, where the gate's callers have always found it).

pub mod dns;
pub mod gate;
pub mod http1;
pub mod inject;
pub mod sni;
pub mod tls;

pub use airlock_rules::{ip, rules};
pub use airlock_rules::{Ask, Decision, Destination, Egress, RuleError};

#[doc(hidden)]
pub mod fuzzing;
