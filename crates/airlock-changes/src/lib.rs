//! Change sets: what a session's copy-on-write layer changed in its workspace, how it reads as a
//! git patch, and which changes are hazards. Files only: this crate never mounts or runs anything.

pub mod apply;
pub mod hazard;
pub mod limits;
pub mod node;
pub mod patch;
pub mod scan;

pub use hazard::Hazard;
pub use node::{Kind, Node};
pub use patch::Roots;
pub use scan::{scan, Change, ChangeSet, OverlayXattrs, ScanError, Status};
