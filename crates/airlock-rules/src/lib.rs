//! What a profile's `[network]` allows: destinations by name or address, the decision for one
//! attempt, and the classes of address the host must be protected from. Pure: the policy crate
//! parses profiles into these types, and the network gate decides by them.

pub mod ip;
pub mod rules;

pub use rules::{Decision, Destination, Egress, RuleError};
