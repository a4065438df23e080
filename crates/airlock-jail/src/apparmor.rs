//! Ubuntu's AppArmor restriction of unprivileged user namespaces (23.10 and later, the default
//! from 24.04 LTS on): with `kernel.apparmor_restrict_unprivileged_userns=1` an unprivileged
//! process may still create a user namespace, but unless an AppArmor profile with the `userns`
//! rule confines it, the kernel moves it into the `unprivileged_userns` profile, where it has no
//! capabilities: every step of a sandbox after the clone then fails with a bare EPERM.
//!
//! Found by reading files under a root directory ("/" in production, a recorded tree in
//! tests), so that `airlock check` and `airlock run` can say what is wrong and how to fix it
//! before anything is tried. Every word they say about it is made here.

use std::path::{Path, PathBuf};

/// The name of the profile in `packaging/apparmor/airlock`.
pub const PROFILE_NAME: &str = "airlock";
/// The paths that profile attaches to, as it spells them.
pub const PROFILE_ATTACHMENT: &str = "/usr/{local/,}bin/airlock";
const PROFILE_PATHS: [&str; 2] = ["/usr/local/bin/airlock", "/usr/bin/airlock"];
const SYSCTL: &str = "kernel.apparmor_restrict_unprivileged_userns";
/// CAP_SYS_ADMIN's bit in /proc/self/status' CapEff.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether AppArmor keeps this process from using unprivileged user namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsernsRestriction {
    /// Nothing restricts them (why not, for the record).
    NotRestricted { why: &'static str },
    /// Restricted, but not for a process with CAP_SYS_ADMIN in the initial user namespace.
    Privileged,
    /// Restricted, and airlock's profile confines this process: it may create them.
    AllowedByProfile { label: String },
    /// Restricted, and another profile confines this process: it may create them only if that
    /// profile has the `userns` rule (which the sandbox's own probe then shows).
    OtherProfile { label: String },
    /// Restricted and unconfined: a sandbox cannot be built.
    Blocked {
        binary: PathBuf,
        /// Whether a profile named airlock is loaded; None when this user may not read the
        /// list of profiles (the kernel lets only root read it).
        profile_loaded: Option<bool>,
    },
}

/// What AppArmor does to this process, the running airlock binary. In debug builds (the test
/// suite's) `AIRLOCK_TEST_APPARMOR_ROOT` names a recorded tree to read instead of "/", so that
/// the CLI's words for a restricted Ubuntu can be tested on machines without AppArmor.
pub fn detect_here() -> UsernsRestriction {
    let binary = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("airlock"));
    #[cfg(debug_assertions)]
    if let Some(root) = std::env::var_os("AIRLOCK_TEST_APPARMOR_ROOT") {
        return detect(Path::new(&root), &binary);
    }
    detect(Path::new("/"), &binary)
}

/// What AppArmor does to `binary` running with the kernel files found under `root`.
pub fn detect(root: &Path, binary: &Path) -> UsernsRestriction {
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).ok().map(|s| {
            s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
                .to_owned()
        })
    };
    let lsm_on = match read("sys/module/apparmor/parameters/enabled") {
        Some(enabled) => enabled == "Y",
        None => root.join("sys/kernel/security/apparmor").is_dir(),
    };
    if !lsm_on {
        return UsernsRestriction::NotRestricted {
            why: "AppArmor is not enabled",
        };
    }
    match read("proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() {
        None => {
            return UsernsRestriction::NotRestricted {
                why: "this kernel's AppArmor does not restrict user namespaces",
            }
        }
        Some("0") => {
            return UsernsRestriction::NotRestricted {
                why: "kernel.apparmor_restrict_unprivileged_userns=0",
            }
        }
        Some(_) => {}
    }
    if privileged(read("proc/self/status"), read("proc/self/uid_map")) {
        return UsernsRestriction::Privileged;
    }
    let label = read("proc/self/attr/apparmor/current")
        .filter(|l| !l.is_empty())
        .or_else(|| read("proc/self/attr/current"))
        .unwrap_or_else(|| "unconfined".into());
    match profile_name(&label) {
        None => UsernsRestriction::Blocked {
            binary: binary.to_owned(),
            profile_loaded: read("sys/kernel/security/apparmor/profiles")
                .map(|list| list.lines().any(|l| profile_name(l) == Some(PROFILE_NAME))),
        },
        Some(PROFILE_NAME) => UsernsRestriction::AllowedByProfile { label },
        Some(_) => UsernsRestriction::OtherProfile { label },
    }
}

/// The profile a label or a line of the profile list names ("airlock (enforce)" → "airlock");
/// None when unconfined.
fn profile_name(label: &str) -> Option<&str> {
    let name = label.rsplit_once(" (").map_or(label, |(name, _mode)| name);
    (name != "unconfined" && !name.is_empty()).then_some(name)
}

/// CAP_SYS_ADMIN in the initial user namespace: the restriction does not apply.
fn privileged(status: Option<String>, uid_map: Option<String>) -> bool {
    let cap_sys_admin = status
        .as_deref()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:")))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0);
    let initial_namespace = uid_map.is_some_and(|map| crate::privilege::is_initial_namespace(&map));
    cap_sys_admin && initial_namespace
}

impl UsernsRestriction {
    /// True when no sandbox can be built: `run` refuses, `check` says "protection: none".
    pub fn blocks(&self) -> bool {
        matches!(self, UsernsRestriction::Blocked { .. })
    }

    /// What it means for airlock, in a sentence; None when nothing restricts user namespaces.
    pub fn summary(&self) -> Option<String> {
        let restricted = format!("AppArmor restricts unprivileged user namespaces ({SYSCTL}=1)");
        Some(match self {
            UsernsRestriction::NotRestricted { .. } => return None,
            UsernsRestriction::Privileged => {
                format!("{restricted}, but not for airlock: it runs with CAP_SYS_ADMIN")
            }
            UsernsRestriction::AllowedByProfile { label } => {
                format!("{restricted}; airlock's profile confines it ({label}) and allows them")
            }
            UsernsRestriction::OtherProfile { label } => format!(
                "{restricted}; airlock runs under the AppArmor profile {label}, which allows them \
                 only if it has the userns rule"
            ),
            UsernsRestriction::Blocked {
                binary,
                profile_loaded,
            } => {
                let profile = match profile_loaded {
                    Some(true) => format!(
                        "airlock's profile is loaded but does not apply to this binary: it \
                         names {PROFILE_ATTACHMENT}, and this binary is {}",
                        binary.display()
                    ),
                    Some(false) => "airlock's AppArmor profile is not loaded".into(),
                    None => "whether airlock's profile is loaded, only root can see".into(),
                };
                format!(
                    "{restricted}, and no profile allows them to {}, which runs unconfined: \
                     {profile}",
                    binary.display()
                )
            }
        })
    }

    /// The commands that fix it, one per line, the better first; None when nothing needs fixing.
    pub fn fix(&self) -> Option<String> {
        let UsernsRestriction::Blocked { binary, .. } = self else {
            return None;
        };
        Some(format!(
            "Either load airlock's AppArmor profile (better: it lets airlock alone create user \
             namespaces), from airlock's source tree:\n    {}\n\
             or lift the restriction for every program until the next boot (weaker):\n    \
             sudo sysctl {SYSCTL}=0",
            install_profile(binary)
        ))
    }

    /// `run`'s refusal: the summary and the fix, or None when a sandbox can be built.
    pub fn refusal(&self) -> Option<String> {
        if !self.blocks() {
            return None;
        }
        Some(format!(
            "cannot build a sandbox: {}.\n{}",
            self.summary()?,
            self.fix()?
        ))
    }
}

/// The commands that install and load the profile for `binary`: as shipped when it is at a path
/// the profile names, else with that path put in.
fn install_profile(binary: &Path) -> String {
    const LOAD: &str = "sudo apparmor_parser -r /etc/apparmor.d/airlock";
    const SHIPPED: &str = "packaging/apparmor/airlock";
    let path = binary.to_string_lossy();
    if PROFILE_PATHS.contains(&path.as_ref()) {
        return format!("sudo install -m 644 {SHIPPED} /etc/apparmor.d/airlock && {LOAD}");
    }
    let plain = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._+-".contains(c));
    if plain {
        format!(
            "sed 's#{PROFILE_ATTACHMENT}#{path}#' {SHIPPED} | sudo tee /etc/apparmor.d/airlock \
             >/dev/null && {LOAD}"
        )
    } else {
        format!(
            "copy {SHIPPED} to /etc/apparmor.d/airlock with {PROFILE_ATTACHMENT} replaced by \
             \"{path}\" (quoted), then: {LOAD}"
        )
    }
}

#[cfg(test)]
mod tests;
