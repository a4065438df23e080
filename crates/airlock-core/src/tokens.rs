//! API tokens: one per automation, bound to a profile, a role and (for agents) a workspace. airlock
//! keeps only each token's SHA-256; the token itself is shown once, when it is made.
//!
//! ```text
//! STATE/tokens.json   every token's record (id, name, role, binding, times, hash), mode 0600
//! STATE/tokens.lock   flock held while the file is rewritten
//! ```
//!
//! A token reads `airlock_<id>_<secret>`: the id (8 random bytes, hex) names it in lists and in
//! the audit log; the secret (32 random bytes, hex) is what makes it unguessable.

use std::fs;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::caller::{load_trusted_profile, Caller, Grant, ProfileChoice, Role};
use crate::error::Error;
use crate::io_failure::io;
use crate::session::now;

const PREFIX: &str = "airlock_";

/// One token as airlock keeps it: never the token, only its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    pub name: Option<String>,
    pub role: Role,
    pub profile: String,
    /// The workspace its sessions and runs overlay (canonical); None: it names one per request
    /// (operators only).
    pub workspace: Option<PathBuf>,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub expires: Option<u64>,
    pub revoked: Option<u64>,
    /// SHA-256 of the whole token, hex.
    hash: String,
}

impl TokenRecord {
    /// Whether it still opens the door at `at` (seconds).
    fn state_at(&self, at: u64) -> TokenState {
        if self.revoked.is_some() {
            TokenState::Revoked
        } else if self.expires.is_some_and(|end| end <= at) {
            TokenState::Expired
        } else {
            TokenState::Valid
        }
    }

    /// What a request made with this token may reach.
    pub fn grant(&self) -> Grant {
        Grant {
            token: self.id.clone(),
            profile: self.profile.clone(),
            workspace: self.workspace.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenState {
    Valid,
    Expired,
    Revoked,
}

/// A token as `token list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TokenSummary {
    #[serde(flatten)]
    pub record: TokenRecord,
    pub state: TokenState,
    pub created_at: String,
    pub expires_at: Option<String>,
}

impl TokenSummary {
    fn of(record: &TokenRecord) -> TokenSummary {
        TokenSummary {
            state: record.state_at(now()),
            created_at: crate::timestamp(record.created),
            expires_at: record.expires.map(crate::timestamp),
            record: record.clone(),
        }
    }
}

/// A new token, as an operator asks for it.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub profile: String,
    pub role: Role,
    pub workspace: Option<PathBuf>,
    /// How long it lives (`30d`, `12h`); default: until revoked.
    pub expires: Option<String>,
    pub name: Option<String>,
}

/// A token just made: the only time the token itself is known.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub summary: TokenSummary,
    pub token: String,
}

#[derive(Serialize)]
struct TokenAudit<'a> {
    token_id: &'a str,
    name: Option<&'a str>,
    role: Role,
    profile: &'a str,
    workspace: Option<&'a Path>,
    expires: Option<u64>,
}

/// Why a presented token opens nothing (every one an HTTP 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no token: send 'Authorization: Bearer TOKEN' (an operator makes one with 'airlock token create')")]
    Missing,
    #[error("the token is not one airlock made, or its record is gone: ask an operator for a new one ('airlock token create')")]
    Unknown,
    #[error("the token was revoked: ask an operator for a new one ('airlock token create')")]
    Revoked,
    #[error("the token has expired: ask an operator for a new one ('airlock token create')")]
    Expired,
}

impl AuthError {
    pub fn code(self) -> &'static str {
        match self {
            AuthError::Missing => "token_missing",
            AuthError::Unknown => "token_unknown",
            AuthError::Revoked => "token_revoked",
            AuthError::Expired => "token_expired",
        }
    }
}

fn store(state_dir: &Path) -> PathBuf {
    state_dir.join("tokens.json")
}

fn untrusted(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |why| Error::StateUntrusted {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Who may own a token file airlock reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owners {
    /// This user alone: the state directory's store, which airlock itself writes.
    ThisUser,
    /// This user or root: a file given to the server (`--tokens-file`), such as a Kubernetes
    /// Secret, which the kubelet mounts as root's. Root could write any file of this user's
    /// anyway, so trusting root's adds no one.
    ThisUserOrRoot,
}

/// The records of the store, if it is this user's own and no one else could have written it.
fn read_records(path: &Path) -> Result<Vec<TokenRecord>, Error> {
    read_records_owned(path, Owners::ThisUser)
}

fn read_records_owned(path: &Path, owners: Owners) -> Result<Vec<TokenRecord>, Error> {
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", path)(e).into()),
    };
    // Checked on the file opened, not on the path, which could be another file by now.
    let meta = file.metadata().map_err(io("read", path))?;
    let root_owns = owners == Owners::ThisUserOrRoot && meta.uid() == 0;
    let risk = "whoever can write it can add tokens";
    if root_owns {
        crate::paths::check_not_writable_by_others(path, &meta, risk)
    } else {
        crate::paths::check_private(path, &meta, risk)
    }
    .map_err(untrusted(path))?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).map_err(io("read", path))?;
    serde_json::from_slice(&text).map_err(|e| Error::State {
        action: "parse",
        path: path.to_path_buf(),
        source: std::io::Error::other(format!(
            "{e} — restore it from a backup, or remove it (every token then stops working)"
        )),
    })
}

/// Rewrite the store with `change` applied, under its lock, atomically.
fn update<T>(
    state_dir: &Path,
    change: impl FnOnce(&mut Vec<TokenRecord>) -> Result<T, Error>,
) -> Result<T, Error> {
    crate::session::staging_dir(state_dir)?;
    let _lock = crate::paths::lock_private(
        &state_dir.join("tokens.lock"),
        "the token store is then not this user's alone",
    )?;
    let path = store(state_dir);
    let mut records = read_records(&path)?;
    let answer = change(&mut records)?;
    crate::paths::replace_private(&path, &serde_json::to_vec_pretty(&records)?)?;
    Ok(answer)
}

pub(crate) fn random_hex(bytes: usize) -> Result<String, Error> {
    let mut buf = vec![0u8; bytes];
    let source = Path::new("/dev/urandom");
    fs::File::open(source)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(io("read", source))?;
    Ok(hex::encode(&buf))
}

pub(crate) fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Equal without telling, by how long it took, how much of the two was.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

fn check_name(name: &str) -> Result<(), Error> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        Ok(())
    } else {
        Err(Error::Argument {
            arg: format!("--name {name:?}"),
            why: "use letters, digits, '-', '_' and '.' (at most 64)".into(),
        })
    }
}

/// The token's binding, judged: its profile loads from where policy lives, its workspace is one
/// a session may overlay, and an agent has one.
fn checked_binding(caller: &Caller, request: &TokenRequest) -> Result<Option<PathBuf>, Error> {
    let workspace = match &request.workspace {
        Some(dir) => Some(caller.workspace(Some(dir))?),
        None if request.role == Role::Agent => {
            return Err(Error::Argument {
                arg: "--workspace".into(),
                why: "an agent token needs one: the directory its sessions overlay (an empty directory for commands that need none)".into(),
            })
        }
        None => None,
    };
    let profile = ProfileChoice {
        name: Some(request.profile.clone()),
        file: None,
    }
    .resolve(caller)?;
    let state_dir = caller.state_dir()?;
    if let Some(dir) = &workspace {
        load_trusted_profile(caller, &profile, dir)?;
        crate::run::check_workspace_for(dir, &state_dir, caller.home().as_deref())?;
    } else {
        airlock_policy::load_named(&profile.name, &caller.profile_search_dirs())?;
    }
    Ok(workspace)
}

/// Make a token (operators only). Logged before it is stored; the token is in the answer only.
pub fn create_token(caller: &Caller, request: TokenRequest) -> Result<CreatedToken, Error> {
    crate::refusal::audited(caller, "token.refused", None, || {
        caller.must_be_operator("make tokens")?;
        if caller.grant.is_some() {
            return Err(Error::NotPermitted {
                what: "make tokens through the API".into(),
            });
        }
        if let Some(name) = &request.name {
            check_name(name)?;
        }
        let workspace = checked_binding(caller, &request)?;
        let created = now();
        let expires = match &request.expires {
            Some(text) => Some(created + parse_lifetime(text)?),
            None => None,
        };
        let id = random_hex(8)?;
        let token = format!("{PREFIX}{id}_{}", random_hex(32)?);
        let record = TokenRecord {
            id,
            name: request.name.clone(),
            role: request.role,
            profile: request.profile.clone(),
            workspace,
            created,
            expires,
            revoked: None,
            hash: hash(&token),
        };
        let state_dir = caller.state_dir()?;
        let audit = TokenAudit {
            token_id: &record.id,
            name: record.name.as_deref(),
            role: record.role,
            profile: &record.profile,
            workspace: record.workspace.as_deref(),
            expires: record.expires,
        };
        crate::audit::append(
            &crate::audit::log_for(caller, &state_dir),
            "token.create",
            serde_json::to_value(audit)?,
        )?;
        update(&state_dir, |records| {
            if let Some(name) = &record.name {
                let taken = records
                    .iter()
                    .any(|r| r.revoked.is_none() && r.name.as_deref() == Some(name));
                if taken {
                    return Err(Error::Argument {
                        arg: format!("--name {name}"),
                        why: "a token of that name exists: revoke it first, or choose another"
                            .into(),
                    });
                }
            }
            records.push(record.clone());
            Ok(())
        })?;
        Ok(CreatedToken {
            summary: TokenSummary::of(&record),
            token,
        })
    })
}

fn parse_lifetime(text: &str) -> Result<u64, Error> {
    let refused = |why: String| Error::Argument {
        arg: format!("--expires {text:?}"),
        why,
    };
    match airlock_policy::units::parse_duration(text) {
        Ok(0) => Err(refused(
            "a token must live at least a second (try 12h, 30d)".into(),
        )),
        Ok(seconds) => Ok(seconds),
        Err(e) => Err(refused(e.to_string())),
    }
}

/// Every token (operators at the machine only): none is shown, only what it is bound to.
pub fn list_tokens(caller: &Caller) -> Result<Vec<TokenSummary>, Error> {
    caller.must_be_operator("list tokens")?;
    let records = read_records(&store(&caller.state_dir()?))?;
    Ok(records
        .iter()
        .filter(|r| caller.grant.as_ref().is_none_or(|g| g.token == r.id))
        .map(TokenSummary::of)
        .collect())
}

/// Revoke a token by id or name: from the next request on, it opens nothing.
pub fn revoke_token(caller: &Caller, id_or_name: &str) -> Result<TokenSummary, Error> {
    crate::refusal::audited(caller, "token.refused", None, || {
        caller.must_be_operator("revoke tokens")?;
        if caller.grant.is_some() {
            return Err(Error::NotPermitted {
                what: "revoke tokens through the API".into(),
            });
        }
        let state_dir = caller.state_dir()?;
        let records = read_records(&store(&state_dir))?;
        let found = find(&records, id_or_name)?;
        let fields = serde_json::json!({ "token_id": found.id, "name": found.name });
        crate::audit::append(
            &crate::audit::log_for(caller, &state_dir),
            "token.revoke",
            fields,
        )?;
        let id = found.id.clone();
        update(&state_dir, |records| {
            let record = records
                .iter_mut()
                .find(|r| r.id == id)
                .ok_or_else(|| unknown_token(id_or_name))?;
            record.revoked.get_or_insert_with(now);
            Ok(TokenSummary::of(record))
        })
    })
}

fn unknown_token(id_or_name: &str) -> Error {
    Error::Argument {
        arg: format!("token {id_or_name:?}"),
        why: "no such token — 'airlock token list' shows them".into(),
    }
}

/// The one record an id or name names: an id first, else the one unrevoked token of that name.
fn find<'a>(records: &'a [TokenRecord], id_or_name: &str) -> Result<&'a TokenRecord, Error> {
    records
        .iter()
        .find(|r| r.id == id_or_name)
        .or_else(|| {
            records
                .iter()
                .find(|r| r.revoked.is_none() && r.name.as_deref() == Some(id_or_name))
        })
        .ok_or_else(|| unknown_token(id_or_name))
}

/// The tokens of a state directory, read again whenever the file changes (so a revocation holds
/// from the next request on), for a server that checks every request.
pub struct Tokens {
    path: PathBuf,
    owners: Owners,
    cache: Mutex<Option<(Stamp, Vec<TokenRecord>)>>,
}

/// What tells that the file changed: its inode (a rename replaces it), size and change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp(u64, u64, i64, i64);

impl Tokens {
    pub fn new(state_dir: &Path) -> Tokens {
        Tokens {
            path: store(state_dir),
            owners: Owners::ThisUser,
            cache: Mutex::new(None),
        }
    }

    /// The tokens of `file` (in the store's format), which this process only reads: a file
    /// mounted in for a server (`airlock serve --tokens-file`), this user's or root's.
    pub fn from_file(file: &Path) -> Tokens {
        Tokens {
            path: file.to_path_buf(),
            owners: Owners::ThisUserOrRoot,
            cache: Mutex::new(None),
        }
    }

    /// Whether the store can be read and trusted now: a server checks it as it starts, so that a
    /// store it would refuse on every request is said at once (each request then opens nothing).
    pub fn check(&self) -> Result<(), Error> {
        read_records_owned(&self.path, self.owners).map(|_| ())
    }

    /// The record of the token presented (`None`: no credentials were sent), if it is valid now.
    pub fn authenticate(&self, presented: Option<&str>) -> Result<TokenRecord, AuthError> {
        let presented = presented.ok_or(AuthError::Missing)?;
        let id = presented
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .map(|(id, _)| id)
            .ok_or(AuthError::Unknown)?;
        let record = self.record(id).ok_or(AuthError::Unknown)?;
        if !same(&record.hash, &hash(presented)) {
            return Err(AuthError::Unknown);
        }
        match record.state_at(now()) {
            TokenState::Valid => Ok(record),
            TokenState::Revoked => Err(AuthError::Revoked),
            TokenState::Expired => Err(AuthError::Expired),
        }
    }

    /// Whether the token of `id` still opens the door (neither revoked nor expired, its record
    /// there): asked again and again by what goes on after the request that started it (a run,
    /// an audit log followed).
    pub fn is_valid(&self, id: &str) -> bool {
        self.record(id)
            .is_some_and(|record| record.state_at(now()) == TokenState::Valid)
    }

    /// The record of `id` if that token still opens the door.
    pub fn valid_record(&self, id: &str) -> Option<TokenRecord> {
        self.record(id)
            .filter(|record| record.state_at(now()) == TokenState::Valid)
    }

    /// The record of `id`, from the file as it is now. A file that cannot be read opens nothing.
    fn record(&self, id: &str) -> Option<TokenRecord> {
        let meta = fs::metadata(&self.path).ok()?;
        let stamp = Stamp(meta.ino(), meta.size(), meta.ctime(), meta.ctime_nsec());
        let mut cache = self.cache.lock().ok()?;
        if cache.as_ref().is_none_or(|(seen, _)| *seen != stamp) {
            *cache = Some((stamp, read_records_owned(&self.path, self.owners).ok()?));
        }
        let (_, records) = cache.as_ref()?;
        records.iter().find(|r| r.id == id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_is_exact() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "abcd"));
    }

    #[test]
    fn a_store_others_could_write_opens_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let record = TokenRecord {
            id: "0011223344556677".into(),
            name: None,
            role: Role::Operator,
            profile: "default".into(),
            workspace: None,
            created: now(),
            expires: None,
            revoked: None,
            hash: hash("airlock_0011223344556677_secret"),
        };
        update(state.path(), |r| {
            r.push(record.clone());
            Ok(())
        })
        .unwrap();
        let tokens = Tokens::new(state.path());
        let presented = Some("airlock_0011223344556677_secret");
        assert!(tokens.check().is_ok() && tokens.authenticate(presented).is_ok());
        let path = store(state.path());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        let refused = tokens.check().unwrap_err().to_string();
        assert!(
            refused.contains(&path.display().to_string()) && refused.contains("chmod 600"),
            "{refused}"
        );
        assert_eq!(
            tokens.authenticate(presented).unwrap_err(),
            AuthError::Unknown
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(tokens.authenticate(presented).is_ok());

        // The same file given to a server (a mounted Secret, readable by its group): the same
        // rule against writers; a file of another user, not root, opens nothing.
        let given = Tokens::from_file(&path);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o440)).unwrap();
        assert!(given.check().is_ok() && given.authenticate(presented).is_ok());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o660)).unwrap();
        assert!(given
            .check()
            .unwrap_err()
            .to_string()
            .contains("group-writable"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o440)).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
            let refused = given.check().unwrap_err().to_string();
            assert!(refused.contains("owned by uid 4242"), "{refused}");
        }
    }

    #[test]
    fn a_token_is_its_id_and_a_secret() {
        let state = tempfile::tempdir().unwrap();
        let tokens = Tokens::new(state.path());
        assert_eq!(tokens.authenticate(None).unwrap_err(), AuthError::Missing);
        assert_eq!(
            tokens.authenticate(Some("Bearer x")).unwrap_err(),
            AuthError::Unknown
        );
        let record = TokenRecord {
            id: "0011223344556677".into(),
            name: None,
            role: Role::Agent,
            profile: "default".into(),
            workspace: None,
            created: now(),
            expires: None,
            revoked: None,
            hash: hash("airlock_0011223344556677_secret"),
        };
        update(state.path(), |r| {
            r.push(record.clone());
            Ok(())
        })
        .unwrap();
        let ok = tokens.authenticate(Some("airlock_0011223344556677_secret"));
        assert_eq!(ok.unwrap().id, record.id);
        let wrong = tokens.authenticate(Some("airlock_0011223344556677_secreT"));
        assert_eq!(wrong.unwrap_err(), AuthError::Unknown);
        update(state.path(), |r| {
            r[0].revoked = Some(now());
            Ok(())
        })
        .unwrap();
        let revoked = tokens.authenticate(Some("airlock_0011223344556677_secret"));
        assert_eq!(revoked.unwrap_err(), AuthError::Revoked);
        let mode = fs::metadata(store(state.path())).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
