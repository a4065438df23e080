//! What a session's `meta.json` records, and what a session is doing.

use std::path::PathBuf;

use airlock_jail::Way;
use serde::{Deserialize, Serialize};

/// Where a session is in its life. Whether a run is going on is not stored: the lock says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Its layer exists; runs may use it.
    Active,
    /// Its changes were written to the host workspace (its layer is kept for `revert`).
    Applied,
    /// Its layer was dropped.
    Discarded,
}

/// The profile a session's runs apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRef {
    /// The name it is looked up by (or the file stem of a profile file).
    pub name: String,
    /// Set when the profile was given as a file (`--profile-file`).
    #[serde(default)]
    pub file: Option<PathBuf>,
}

/// What `meta.json` records (and `sessions --json` shows: every field always, null when unset).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionMeta {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub profile: ProfileRef,
    /// Canonical host path of the workspace.
    pub workspace: PathBuf,
    /// Seconds since the Unix epoch.
    pub created: u64,
    #[serde(default)]
    pub last_run: Option<u64>,
    #[serde(default)]
    pub runs: u64,
    pub lifecycle: Lifecycle,
    /// When it was applied or discarded.
    #[serde(default)]
    pub ended: Option<u64>,
    /// As root, for a profile with [limits] disk or files: the layer lives on a filesystem of
    /// its own, which the kernel holds to them. None: a directory in the state directory.
    #[serde(default)]
    pub image: Option<LayerImage>,
    /// The id of the API token whose request made it (its agent alone may use it); None: made
    /// at the machine.
    #[serde(default)]
    pub token: Option<String>,
    /// The way it was made (see [`airlock_jail::privilege`]), which is the only way its layer is
    /// read: the rootful way's overlay keeps its marks in `trusted.overlay.*` xattrs, the user
    /// namespace's in `user.overlay.*`. Records of earlier versions said `"rootful": true|false`,
    /// or nothing (made when root's sessions were the rootful ones): see [`way_on_disk`].
    #[serde(
        alias = "rootful",
        default = "way_on_disk::unrecorded",
        deserialize_with = "way_on_disk::read"
    )]
    pub way: Way,
}

/// How the records of earlier versions said a session's way.
mod way_on_disk {
    use airlock_jail::Way;
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Recorded {
        Way(Way),
        Rootful(Option<bool>),
    }

    pub(super) fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Way, D::Error> {
        Ok(match Recorded::deserialize(deserializer)? {
            Recorded::Way(way) => way,
            Recorded::Rootful(Some(true)) => Way::Rootful,
            Recorded::Rootful(Some(false)) => Way::UserNamespace,
            Recorded::Rootful(None) => unrecorded(),
        })
    }

    /// A record from before the way was kept: root's sessions were then made the rootful way,
    /// and a session's record lives in the state directory of the user who made it.
    pub(super) fn unrecorded() -> Way {
        if nix::unistd::geteuid().is_root() {
            Way::Rootful
        } else {
            Way::UserNamespace
        }
    }
}

/// The size of a session's own filesystem: `layer.img` in the session's directory, mounted at
/// `layer/` while the session exists (again on demand, after a reboot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerImage {
    pub bytes: u64,
    pub files: Option<u64>,
}

/// What a session is doing, for people and scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    /// A run, an apply or a discard holds it.
    Running,
    /// Its run is frozen by 'airlock pause'.
    Paused,
    Applied,
    Discarded,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::Paused => "paused",
            SessionStatus::Applied => "applied",
            SessionStatus::Discarded => "discarded",
        }
    }
}
