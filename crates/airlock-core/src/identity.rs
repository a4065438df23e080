//! Who a sandbox runs as on the host, and which layers a caller may give up: decisions a front
//! end passes on as the caller asked them, and core makes.

use std::path::Path;

use airlock_jail::{Degraded, Way};

use crate::error::Error;

/// Host uid and gid a sandbox runs as when airlock itself runs as root: unprivileged, and outside
/// the ranges distributions give to users and to subordinate ids, so it owns nothing else.
pub const DEFAULT_ROOT_SANDBOX_ID: u32 = 2_999_000;

/// The layers a caller accepts to run without (`--allow-degraded NAME`): Landlock, the second
/// layer behind the namespaces; `cpus` and `disk`, limits the profile names that the kernel
/// cannot enforce here (see `run::limits`). The namespaces, overlayfs and seccomp are always
/// required.
pub(crate) fn accepted_degradation(names: &[String]) -> Result<Degraded, Error> {
    let mut degraded = Degraded::default();
    for name in names {
        match name.trim() {
            "landlock" => degraded.landlock = true,
            "cpus" => degraded.cpus = true,
            "disk" => degraded.disk = true,
            other => {
                return Err(Error::Argument {
                    arg: "--allow-degraded".into(),
                    why: format!(
                        "unknown layer {other:?}; what may be given up is: landlock, cpus \
                         (a cpus limit by nice 19 only), disk (a disk/files limit by a watch on \
                         free space only); namespaces, overlayfs and seccomp are always required"
                    ),
                })
            }
        }
    }
    Ok(degraded)
}

/// The host uid and gid of a run's sandbox user: the rootful way (root with CAP_SYS_ADMIN, see
/// [`airlock_jail::privilege`]), a dedicated unprivileged id (the one the caller chose, which no
/// host user may have); in a user namespace, the caller's own (for a container's root, its uid 0
/// without capabilities).
pub(crate) fn sandbox_host_ids(way: Way, chosen: Option<u32>) -> Result<(u32, u32), Error> {
    if !way.is_rootful() {
        if chosen.is_some() {
            let why = if nix::unistd::geteuid().is_root() {
                "applies only to a root with CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID and \
                 CAP_SETGID on the host; without them (in a container) the sandbox user is this \
                 root's own uid, in a user namespace; leave it out"
            } else {
                "applies to root's runs only: unprivileged, the sandbox user is you; leave it out"
            };
            return Err(Error::Argument {
                arg: "--sandbox-uid (or AIRLOCK_SANDBOX_UID)".into(),
                why: why.into(),
            });
        }
        return Ok((
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        ));
    }
    let Some(id) = chosen else {
        // airlock's own choice; looking it up costs more than a run's setup step.
        return Ok((DEFAULT_ROOT_SANDBOX_ID, DEFAULT_ROOT_SANDBOX_ID));
    };
    if id == 0 {
        return Err(Error::Argument {
            arg: "--sandbox-uid 0".into(),
            why: "the sandbox user must never be root; choose an unused unprivileged id".into(),
        });
    }
    // The id is the sandbox's gid too: a group of that id would give the sandbox its files.
    for (database, what) in [("passwd", "uid of user"), ("group", "gid of group")] {
        if let Some(name) = host_entry_with_id(database, id)? {
            // The sandbox's files and processes would be theirs, and theirs the sandbox's.
            return Err(Error::Argument {
                arg: format!("--sandbox-uid {id}"),
                why: format!("that is the {what} {name}; choose an id no user, group or service of this host has"),
            });
        }
    }
    Ok((id, id))
}

/// The host user (`passwd`) or group (`group`) with id `uid`, if any. Asked of `getent`, a
/// dynamically linked program that goes through every NSS service the host configures (LDAP,
/// sssd, systemd's dynamic users): this binary, when statically linked, reads /etc/passwd and
/// /etc/group only (see airlock_jail::nss). A check that cannot be made refuses the run rather
/// than looking in those files alone.
fn host_entry_with_id(database: &str, uid: u32) -> Result<Option<String>, Error> {
    let getent = ["/usr/bin/getent", "/bin/getent"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or("getent");
    let refuse = |why: String| Error::Argument {
        arg: format!("--sandbox-uid {uid}"),
        why,
    };
    let out = std::process::Command::new(getent)
        .args([database, &uid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            refuse(format!(
                "cannot run {getent} to check that no host {database} entry has that id ({e}; Debian: apt-get install libc-bin)"
            ))
        })?;
    match out.status.code() {
        Some(0) => {
            let line = String::from_utf8_lossy(&out.stdout);
            Ok(Some(line.split(':').next().unwrap_or_default().to_string()))
        }
        // getent's "no such key".
        Some(2) => Ok(None),
        _ => Err(refuse(format!(
            "'{getent} {database} {uid}' failed ({}), so whether a host {database} entry has that id is unknown",
            out.status
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_landlock_and_unenforceable_limits_may_be_given_up() {
        assert!(accepted_degradation(&["landlock".into()]).unwrap().landlock);
        assert!(!accepted_degradation(&[]).unwrap().landlock);
        let limits = accepted_degradation(&["cpus".into(), "disk".into()]).unwrap();
        assert!(limits.cpus && limits.disk && !limits.landlock);
        for layer in ["seccomp", "namespaces", "overlay", ""] {
            assert!(accepted_degradation(&[layer.into()]).is_err(), "{layer}");
        }
    }
}
