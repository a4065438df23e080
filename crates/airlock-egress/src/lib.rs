//! The network gate's decisions: which destinations a profile allows, which addresses are the
//! host's own, what a TLS ClientHello or an HTTP request says it is for. Pure: the data path that
//! applies them to the sandbox's connections is built on these.

pub mod dns;
pub mod gate;
pub mod http1;
pub mod ip;
pub mod rules;
pub mod sni;

pub use rules::{Decision, Destination, Egress, RuleError};
