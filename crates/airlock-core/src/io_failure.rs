//! The one context every failed file operation of core carries: what it was doing, on which
//! path, and the error (its errno). Each error enum of core says it as its own `Io` variant.

use std::path::{Path, PathBuf};

/// A failed file operation: `cannot {action} {path}: {source}`.
#[derive(Debug)]
pub(crate) struct IoFailure {
    pub action: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The context for `map_err`: `fs::read(&p).map_err(io("read", &p))?`.
pub(crate) fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> IoFailure + 'a {
    move |source| IoFailure {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// An error enum whose `Io { action, path, source }` variant an [`IoFailure`] becomes.
macro_rules! io_variant {
    ($error:ident, $variant:ident) => {
        impl From<$crate::io_failure::IoFailure> for $error {
            fn from(failure: $crate::io_failure::IoFailure) -> Self {
                $error::$variant {
                    action: failure.action,
                    path: failure.path,
                    source: failure.source,
                }
            }
        }
    };
}
pub(crate) use io_variant;
