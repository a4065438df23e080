//! What a profile's `[network]` allows: destinations by name or address, the decision for one
//! attempt, the classes of address the host must be protected from, and the requests a host
//! whose connections the gate reads may carry. Pure: the policy crate parses profiles into
//! these types, and the network gate decides by them.

pub mod ask;
pub mod http;
pub mod ip;
pub mod rules;

pub use ask::Ask;
pub use http::{HttpRules, RequestRule};
pub use rules::{is_host_name, Decision, Destination, Egress, RuleError};
