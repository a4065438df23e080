//! Who may open the review page (`airlock serve`'s `/`): an operator, never an agent. A person
//! logs in with a one-time link `airlock review` prints at the machine, or by pasting an operator
//! token; either way the page then works with that operator token's reach, and the server keeps
//! the token's id behind an HttpOnly cookie. Core decides both logins; the server only carries
//! the cookie.
//!
//! ```text
//! STATE/review-links.json   each unused link's SHA-256, token id and end, mode 0600
//! STATE/review-links.lock   flock held while it is rewritten
//! ```
//!
//! A link is used once: the first login with it removes it, whether it worked or not (a link
//! copied out of a terminal's scrollback, or a chat, is worth nothing once used).

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::caller::{Caller, Role};
use crate::error::Error;
use crate::io_failure::io;
use crate::session::now;
use crate::tokens::{self, TokenRecord, TokenRequest, Tokens};

/// How long a link may wait to be used.
pub const LINK_LIFETIME_SECONDS: u64 = 10 * 60;
/// How long the operator token `airlock review` makes for a link lives (the page's login with it
/// ends then too).
pub const PAGE_TOKEN_LIFETIME: &str = "12h";
/// Links not yet used, at most (older ones are dropped first).
const MAX_LINKS: usize = 64;

/// What `airlock review` asks for.
#[derive(Debug, Clone, Default)]
pub struct LinkRequest {
    /// An operator token (id or name) the page works as; None: a new one for `profile`, which
    /// lives [`PAGE_TOKEN_LIFETIME`].
    pub token: Option<String>,
    /// The profile whose sessions the new token reaches (default: `default`).
    pub profile: Option<String>,
}

/// A link just made: the only time its code is known.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewLink {
    /// The one-time code; the page's address carries it after `#code=`, which browsers do not
    /// send to servers or in Referer headers.
    pub code: String,
    pub token_id: String,
    pub profile: String,
    /// Whether the token was made for this link.
    pub token_made: bool,
    pub expires_at: String,
}

/// What a person presents to the page's login.
#[derive(Debug, Clone, Copy)]
pub enum PageCredential<'a> {
    /// The code of a link `airlock review` printed.
    Link(&'a str),
    /// An operator token, pasted.
    Token(&'a str),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredLink {
    /// SHA-256 of the code, hex.
    hash: String,
    token: String,
    /// Seconds since the Unix epoch.
    expires: u64,
}

/// A new unguessable value (32 random bytes, hex): the page's cookies and CSRF tokens.
pub fn new_secret() -> Result<String, Error> {
    tokens::random_hex(32)
}

/// Make a one-time link to the review page (at the machine only: an API token cannot mint one).
pub fn create_review_link(caller: &Caller, request: &LinkRequest) -> Result<ReviewLink, Error> {
    crate::refusal::audited(caller, "review.refused", None, || {
        caller.must_be_operator("make review links")?;
        if caller.grant.is_some() {
            return Err(Error::NotPermitted {
                what: "make review links through the API (run 'airlock review' at the machine)"
                    .into(),
            });
        }
        let state_dir = caller.state_dir()?;
        let (token, token_made) = match &request.token {
            Some(named) => (operator_token(caller, named)?, false),
            None => (page_token(caller, request.profile.as_deref())?, true),
        };
        let code = tokens::random_hex(32)?;
        let expires = now() + LINK_LIFETIME_SECONDS;
        crate::audit::append(
            &crate::audit::log_for(caller, &state_dir),
            "review.link",
            serde_json::json!({ "token_id": token.id, "profile": token.profile, "expires": expires }),
        )?;
        update_links(&state_dir, |links| {
            links.retain(|link| link.expires > now());
            if links.len() >= MAX_LINKS {
                links.remove(0);
            }
            links.push(StoredLink {
                hash: tokens::hash(&code),
                token: token.id.clone(),
                expires,
            });
            Ok(())
        })?;
        Ok(ReviewLink {
            code,
            token_id: token.id.clone(),
            profile: token.profile.clone(),
            token_made,
            expires_at: crate::timestamp(expires),
        })
    })
}

/// The operator token a person logs in to the page as, once core has judged what they presented:
/// a link used once and not expired, or a token that is valid and an operator's. Agent tokens
/// never open the page. Every login is audited (`review.login`); refusals are the caller's to
/// record with [`record_refused_logins`], counted: anyone who can connect can be refused, and a
/// record (fsync'd) for each would let them fill the disk.
pub fn page_login(
    service: &Caller,
    tokens: &Tokens,
    credential: PageCredential<'_>,
) -> Result<TokenRecord, Error> {
    {
        let state_dir = service.state_dir()?;
        let (record, by) = match credential {
            PageCredential::Link(code) => (redeem(&state_dir, tokens, code)?, "link"),
            PageCredential::Token(token) => (
                tokens
                    .authenticate(Some(token.trim()))
                    .map_err(|e| Error::Login {
                        why: format!("that token opens nothing ({})", e.code()),
                    })?,
                "token",
            ),
        };
        if record.role != Role::Operator {
            return Err(Error::NotPermitted {
                what: "open the review page with an agent token (the page approves an agent's work: log in with an operator token, or the link 'airlock review' prints)".into(),
            });
        }
        crate::audit::append(
            &crate::audit::log_for(service, &state_dir),
            "review.login",
            serde_json::json!({ "token_id": record.id, "profile": record.profile, "with": by }),
        )?;
        Ok(record)
    }
}

/// `review.refused`: `count` page logins refused since the last such record, the last of them
/// for `why` (best effort, as every refusal's record).
pub fn record_refused_logins(service: &Caller, count: u64, why: &str) {
    let Ok(state_dir) = service.state_dir() else {
        return;
    };
    let fields = serde_json::json!({ "count": count, "error": why, "denied": true });
    let _ = crate::audit::append(
        &crate::audit::log_for(service, &state_dir),
        "review.refused",
        fields,
    );
}

/// The token a link names, the link removed in the same rewrite that finds it.
fn redeem(state_dir: &Path, tokens: &Tokens, code: &str) -> Result<TokenRecord, Error> {
    let hash = tokens::hash(code.trim());
    let found = update_links(state_dir, |links| {
        let at = links.iter().position(|link| link.hash == hash);
        Ok(at.map(|at| links.remove(at)))
    })?;
    let Some(link) = found else {
        return Err(Error::Login {
            why: "that link is unknown or was used already: run 'airlock review' for a new one"
                .into(),
        });
    };
    if link.expires <= now() {
        return Err(Error::Login {
            why: format!(
                "that link expired ({} minutes after it was made): run 'airlock review' for a new one",
                LINK_LIFETIME_SECONDS / 60
            ),
        });
    }
    tokens.valid_record(&link.token).ok_or_else(|| Error::Login {
        why: "the token that link was made for is revoked or expired: run 'airlock review' for a new one".into(),
    })
}

/// A token the caller named, if it is an operator's and valid.
fn operator_token(caller: &Caller, named: &str) -> Result<TokenRecord, Error> {
    let state_dir = caller.state_dir()?;
    let summary = tokens::list_tokens(caller)?
        .into_iter()
        .find(|t| {
            t.record.id == named
                || (t.record.name.as_deref() == Some(named) && t.record.revoked.is_none())
        })
        .ok_or_else(|| Error::Argument {
            arg: format!("--token {named:?}"),
            why: "no such token — 'airlock token list' shows them".into(),
        })?;
    let record = Tokens::new(&state_dir)
        .valid_record(&summary.record.id)
        .ok_or_else(|| Error::Argument {
            arg: format!("--token {named:?}"),
            why: "that token is revoked or expired: choose another, or leave --token out for a new one".into(),
        })?;
    if record.role != Role::Operator {
        return Err(Error::Argument {
            arg: format!("--token {named:?}"),
            why: "that is an agent's token, and agents never open the review page: name an operator token, or leave --token out".into(),
        });
    }
    Ok(record)
}

/// A new operator token for the page, bound to `profile`, living [`PAGE_TOKEN_LIFETIME`].
fn page_token(caller: &Caller, profile: Option<&str>) -> Result<TokenRecord, Error> {
    let made = tokens::create_token(
        caller,
        TokenRequest {
            profile: profile
                .unwrap_or(airlock_policy::DEFAULT_PROFILE_NAME)
                .to_string(),
            role: Role::Operator,
            workspace: None,
            expires: Some(PAGE_TOKEN_LIFETIME.into()),
            name: None,
        },
    )?;
    Ok(made.summary.record)
}

/// Where a running `airlock serve` says its page is.
fn address_file(state_dir: &Path) -> PathBuf {
    state_dir.join("page-address")
}

/// Said by `airlock serve` as it starts listening on TCP.
pub fn remember_page_address(state_dir: &Path, url: &str) -> Result<(), Error> {
    crate::paths::replace_private(&address_file(state_dir), url.as_bytes())
}

/// Said by `airlock serve` as it stops.
pub fn forget_page_address(state_dir: &Path) {
    let _ = fs::remove_file(address_file(state_dir));
}

/// The page's address a running server said, if it is this user's own file: a link's code is a
/// credential, and an address someone else wrote would send it to them.
pub fn page_address(caller: &Caller) -> Result<Option<String>, Error> {
    let path = address_file(&caller.state_dir()?);
    let mut file = match fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", &path)(e).into()),
    };
    let meta = file.metadata().map_err(io("read", &path))?;
    crate::paths::check_private(
        &path,
        &meta,
        "whoever can write it would receive the review link's code",
    )
    .map_err(|why| Error::StateUntrusted {
        path: path.clone(),
        why: why.to_string(),
    })?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io("read", &path))?;
    Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty()))
}

fn store(state_dir: &Path) -> PathBuf {
    state_dir.join("review-links.json")
}

fn read_links(path: &Path) -> Result<Vec<StoredLink>, Error> {
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", path)(e).into()),
    };
    let meta = file.metadata().map_err(io("read", path))?;
    crate::paths::check_private(
        path,
        &meta,
        "whoever can write it can log in to the review page",
    )
    .map_err(|why| Error::StateUntrusted {
        path: path.to_path_buf(),
        why: why.to_string(),
    })?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(io("read", path))?;
    // A file that cannot be parsed holds no link anyone can use: it is started again.
    Ok(serde_json::from_slice(&text).unwrap_or_default())
}

/// Rewrite the links with `change` applied, under their lock, atomically.
fn update_links<T>(
    state_dir: &Path,
    change: impl FnOnce(&mut Vec<StoredLink>) -> Result<T, Error>,
) -> Result<T, Error> {
    crate::session::staging_dir(state_dir)?;
    let _lock = crate::paths::lock_private(
        &state_dir.join("review-links.lock"),
        "whoever holds it can keep review links from being made or used",
    )?;
    let path = store(state_dir);
    let mut links = read_links(&path)?;
    let answer = change(&mut links)?;
    crate::paths::replace_private(&path, &serde_json::to_vec(&links)?)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (tempfile::TempDir, Caller) {
        let dir = tempfile::tempdir().unwrap();
        let caller = Caller::bare(dir.path().to_path_buf(), Role::Operator);
        (dir, caller)
    }

    #[test]
    fn a_link_opens_the_page_once() {
        let (dir, caller) = state();
        let link = create_review_link(&caller, &LinkRequest::default()).unwrap();
        assert!(link.token_made);
        let tokens = Tokens::new(dir.path());
        let record = page_login(&caller, &tokens, PageCredential::Link(&link.code)).unwrap();
        assert_eq!(record.id, link.token_id);
        assert_eq!(record.role, Role::Operator);
        let again = page_login(&caller, &tokens, PageCredential::Link(&link.code)).unwrap_err();
        assert_eq!(again.code().0, "login_refused", "{again}");
        let made_up = page_login(&caller, &tokens, PageCredential::Link("00")).unwrap_err();
        assert_eq!(made_up.code().0, "login_refused");
    }

    #[test]
    fn an_expired_link_opens_nothing() {
        let (dir, caller) = state();
        let link = create_review_link(&caller, &LinkRequest::default()).unwrap();
        update_links(dir.path(), |links| {
            links[0].expires = now() - 1;
            Ok(())
        })
        .unwrap();
        let tokens = Tokens::new(dir.path());
        let refused = page_login(&caller, &tokens, PageCredential::Link(&link.code)).unwrap_err();
        assert!(refused.to_string().contains("expired"), "{refused}");
    }

    #[test]
    fn agents_never_get_a_page_nor_a_link() {
        let (dir, caller) = state();
        let workspace = tempfile::tempdir().unwrap();
        let agent = tokens::create_token(
            &caller,
            TokenRequest {
                profile: "default".into(),
                role: Role::Agent,
                workspace: Some(workspace.path().to_path_buf()),
                expires: None,
                name: Some("bot".into()),
            },
        );
        let agent = agent.unwrap();
        let tokens = Tokens::new(dir.path());
        let refused =
            page_login(&caller, &tokens, PageCredential::Token(&agent.token)).unwrap_err();
        assert_eq!(refused.code().0, "role_forbidden", "{refused}");
        let named = LinkRequest {
            token: Some("bot".into()),
            profile: None,
        };
        let refused = create_review_link(&caller, &named).unwrap_err();
        assert_eq!(refused.code().0, "bad_argument", "{refused}");
        let as_agent = Caller::bare(dir.path().to_path_buf(), Role::Agent);
        let refused = create_review_link(&as_agent, &LinkRequest::default()).unwrap_err();
        assert_eq!(refused.code().0, "role_forbidden");
    }
}
