//! Offering an approval to the profile's `ask_webhook`.

/// Offer `approval` to `url` in the background; never blocks or fails the run.
pub(crate) fn offer(_url: String, _approval: super::Approval, _audit: crate::audit::Log) {}
