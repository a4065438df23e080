//! The requests the HTTP API takes as JSON bodies, and the remote CLI sends: each one of core's
//! serde types, closed to fields it does not know (a typo is an error, not a field ignored), and
//! turned into core's own request here, so that no front end decides what a field means.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::apply::{ApplyOptions, ApplyRequest};
use crate::control::Action;
use crate::kill_switch::{ControlRequest, TargetChoice};
use crate::operations::SessionRequest;

/// `POST /v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSessionBody {
    /// A directory within the token's workspace (default: the token's workspace).
    pub workspace: Option<PathBuf>,
    pub name: Option<String>,
}

impl NewSessionBody {
    pub fn request(self) -> SessionRequest {
        SessionRequest {
            workspace: self.workspace,
            name: self.name,
            ..SessionRequest::default()
        }
    }
}

/// `POST /v1/sessions/{id}/apply`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    /// Only changes at or under these paths (relative to the workspace).
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Overwrite what the host changed meanwhile.
    #[serde(default)]
    pub force: bool,
    /// Write these hazardous paths anyway.
    #[serde(default)]
    pub allow_hazards: Vec<PathBuf>,
    /// Say what would be written; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The digest of the diff reviewed (`sha256:HEX`): write that change set or nothing
    /// (409 `review_stale`).
    #[serde(default)]
    pub reviewed: Option<String>,
}

impl ApplyBody {
    pub fn request(self, session: String) -> ApplyRequest {
        ApplyRequest {
            session,
            options: ApplyOptions {
                paths: self.paths,
                force: self.force,
                allowed_hazards: self.allow_hazards,
                dry_run: self.dry_run,
                reviewed: self.reviewed,
                ..ApplyOptions::default()
            },
        }
    }
}

/// `POST /v1/sessions/{id}/kill|pause|resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlBody {
    /// Why, for the audit log.
    pub reason: Option<String>,
    /// With kill: cut the sandboxes' network instead, leaving their processes.
    #[serde(default)]
    pub network_only: bool,
}

impl ControlBody {
    pub fn request(self, action: Action, session: String) -> ControlRequest {
        ControlRequest {
            action,
            target: TargetChoice {
                session: Some(session),
                ..TargetChoice::default()
            },
            network_only: self.network_only,
            reason: self.reason,
        }
    }
}

/// `POST /v1/disable` and `/v1/enable`: the token's profile switched off (a reason required, as
/// everyone refused reads it) or on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchBody {
    pub reason: Option<String>,
}

/// Revert and discard take no field: a body is still JSON, and an object (`{}` or none), so that
/// a client's mistake is said rather than the request carried out without what it meant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// `POST /v1/login`: the review page's login, by a one-time link's code or an operator token
/// (exactly one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    /// The code after `#code=` in the link `airlock review` printed.
    pub code: Option<String>,
    /// An operator token, pasted.
    pub token: Option<String>,
}

impl LoginBody {
    pub fn credential(&self) -> Result<crate::page_login::PageCredential<'_>, crate::Error> {
        use crate::page_login::PageCredential;
        match (&self.code, &self.token) {
            (Some(code), None) => Ok(PageCredential::Link(code)),
            (None, Some(token)) => Ok(PageCredential::Token(token)),
            _ => Err(crate::Error::Argument {
                arg: "code, token".into(),
                why: "give exactly one: the code of the link 'airlock review' printed, or an operator token".into(),
            }),
        }
    }
}
