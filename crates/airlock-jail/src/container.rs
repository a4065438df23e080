//! Whether this process runs in a container, and which engine made it: `airlock check` then
//! names what the container blocks and the ways forward, which differ by engine.

use std::path::Path;

/// The container engine this process runs under, if any: "podman", "docker", or what the
/// `container` variable names (systemd-nspawn, lxc…), which the engines set for pid 1 and
/// most images pass on.
pub fn detect() -> Option<String> {
    let root_on_overlayfs = nix::sys::statfs::statfs("/")
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::OVERLAYFS_SUPER_MAGIC);
    from_signs(
        Path::new("/run/.containerenv").exists(),
        Path::new("/.dockerenv").exists() && root_on_overlayfs,
        std::env::var("container").ok().as_deref(),
    )
}

/// The decision of [`detect`]: Podman writes /run/.containerenv, Docker /.dockerenv. The
/// latter only counts with a root filesystem on overlayfs (Docker's storage): a machine image
/// made from a Docker image keeps the file after it boots as a machine of its own (this
/// project's CI machines do).
fn from_signs(containerenv: bool, dockerenv: bool, variable: Option<&str>) -> Option<String> {
    if containerenv {
        return Some("podman".into());
    }
    if dockerenv {
        return Some("docker".into());
    }
    variable.filter(|name| !name.is_empty()).map(|name| {
        name.chars()
            .filter(|c| c.is_ascii_graphic())
            .take(32)
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_by_its_sign() {
        assert_eq!(
            from_signs(true, false, Some("podman")).as_deref(),
            Some("podman")
        );
        assert_eq!(from_signs(false, true, None).as_deref(), Some("docker"));
        assert_eq!(
            from_signs(false, false, Some("systemd-nspawn")).as_deref(),
            Some("systemd-nspawn")
        );
        assert_eq!(from_signs(false, false, None), None);
        assert_eq!(from_signs(false, false, Some("")), None);
    }

    #[test]
    fn the_variable_is_shown_tame() {
        let shown = from_signs(false, false, Some("x\u{1b}[31m y")).unwrap_or_default();
        assert_eq!(shown, "x[31my");
    }
}
