//! The `cpus`, `disk` and `files` limits of one run: what the kernel can hold it to here, and
//! what core refuses when it cannot (an explicit limit needs `--allow-degraded`; a default is
//! enforced as well as this host allows).

use std::path::Path;

use airlock_jail::{ChangeLayer, CpuBandwidth, Degraded, DiskGuard};
use airlock_policy::Limits;

use crate::error::Error;
use crate::session::LayerImage;

/// The free space airlock keeps on the state directory's filesystem: a twentieth of it, at
/// least 64 MiB and at most 1 GiB. Enough for the audit log's records of many runs, and far
/// beyond what a writer can add between two looks of the supervisor's watch (~10 MB).
pub fn free_margin(filesystem_bytes: u64) -> u64 {
    (filesystem_bytes / 20).clamp(64 << 20, 1 << 30)
}

/// The free inodes airlock keeps on the state directory's filesystem, of `filesystem_inodes`:
/// a twentieth, at least 1,024 and at most a million; none where the filesystem has no fixed
/// count (0). Empty files take inodes and no bytes, so the byte margin alone would let a run
/// leave the host unable to create a file anywhere on that filesystem.
pub fn free_inode_margin(filesystem_inodes: u64) -> u64 {
    if filesystem_inodes == 0 {
        return 0;
    }
    (filesystem_inodes / 20).clamp(1024, 1 << 20)
}

/// The default `cpus`: every CPU but one, so that the host stays responsive (a host of one
/// CPU gives its one CPU, and the jail adds nice 19 there).
pub fn default_millicpus(online_cpus: u64) -> u64 {
    online_cpus.saturating_sub(1).max(1) * 1000
}

pub(super) fn cpu_bandwidth(limits: &Limits) -> CpuBandwidth {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    CpuBandwidth {
        millicpus: limits
            .millicpus
            .unwrap_or_else(|| default_millicpus(online)),
        explicit: limits.millicpus.is_some(),
    }
}

/// A throwaway run's layer in memory: a tmpfs of `disk` bytes (else `tmp_size`) and `files`
/// inodes, both held by the kernel as root and unprivileged.
pub(super) fn memory_layer(limits: &Limits) -> ChangeLayer {
    ChangeLayer::Memory {
        size_bytes: limits.disk_bytes.unwrap_or(limits.tmp_bytes),
        inodes: limits.files,
    }
}

/// A session's layer on disk (`on_disk`; None for a layer in memory): the watch on the state
/// directory's filesystem's free space, with the profile's `disk` as its budget when the
/// caller accepted that (`--allow-degraded=disk`): no kernel quota bounds a directory for an
/// unprivileged user, and airlock does not set up quotas.
///
/// A layer on a filesystem image of its own (`own_filesystem`, root's sessions with `disk` or
/// `files`) is held to them by the kernel; the watch stays, as the image is sparse and the
/// filesystem under it may fill up all the same.
pub(super) fn disk_guard(
    limits: &Limits,
    state_dir: &Path,
    on_disk: bool,
    own_filesystem: bool,
    degraded: &Degraded,
) -> Result<Option<DiskGuard>, Error> {
    if !on_disk {
        return Ok(None);
    }
    let explicit = limits.disk_bytes.is_some() || limits.files.is_some();
    if explicit && !own_filesystem && !degraded.disk {
        return Err(Error::LimitNotEnforced {
            limit: if limits.disk_bytes.is_some() {
                "disk"
            } else {
                "files"
            },
            why: format!(
                "a session's layer is a directory under {}, and no kernel quota bounds a \
                 directory here; with --allow-degraded=disk, airlock's watch on the \
                 filesystem's free space stops the run past `disk` (files are not bounded)",
                state_dir.display()
            ),
            flag: "disk",
        });
    }
    let stat = statvfs(state_dir)?;
    Ok(Some(DiskGuard {
        keep_free_bytes: free_margin(stat.blocks() * stat.fragment_size()),
        keep_free_inodes: free_inode_margin(stat.files()),
        path: state_dir.to_path_buf(),
        budget_bytes: limits.disk_bytes.filter(|_| !own_filesystem),
    }))
}

/// The filesystem of its own a new session's layer gets: as root, when the profile names
/// `disk` or `files` (without `disk`, as large as the state directory's filesystem has room
/// for above its margin: the image is sparse).
pub(crate) fn layer_image(
    limits: &Limits,
    state_dir: &Path,
    way: airlock_jail::Way,
) -> Result<Option<LayerImage>, Error> {
    // Without mkfs.ext4 or loop devices, the session is a directory, and its runs refuse the
    // limit unless --allow-degraded=disk.
    if !airlock_jail::image::images_supported(way)
        || (limits.disk_bytes.is_none() && limits.files.is_none())
    {
        return Ok(None);
    }
    let bytes = match limits.disk_bytes {
        Some(bytes) => bytes,
        None => {
            let stat = statvfs(state_dir)?;
            let free = stat.blocks_available() * stat.fragment_size();
            free.saturating_sub(free_margin(stat.blocks() * stat.fragment_size()))
        }
    };
    Ok(Some(LayerImage {
        bytes,
        files: limits.files,
    }))
}

fn statvfs(path: &Path) -> Result<nix::sys::statvfs::Statvfs, Error> {
    nix::sys::statvfs::statvfs(path).map_err(|errno| Error::Argument {
        arg: path.display().to_string(),
        why: format!("cannot read its filesystem's size (statvfs): {errno}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_twentieth_within_bounds() {
        assert_eq!(free_margin(0), 64 << 20);
        assert_eq!(free_margin(10 << 30), 512 << 20);
        assert_eq!(free_margin(1 << 40), 1 << 30);
    }

    #[test]
    fn the_inode_margin_is_a_twentieth_within_bounds() {
        assert_eq!(free_inode_margin(0), 0);
        assert_eq!(free_inode_margin(100), 1024);
        assert_eq!(free_inode_margin(2_000_000), 100_000);
        assert_eq!(free_inode_margin(1 << 40), 1 << 20);
    }

    #[test]
    fn the_default_leaves_the_host_a_cpu() {
        assert_eq!(default_millicpus(1), 1000);
        assert_eq!(default_millicpus(2), 1000);
        assert_eq!(default_millicpus(16), 15_000);
    }

    #[test]
    fn a_memory_layer_takes_disk_and_files() {
        let limits = Limits {
            disk_bytes: Some(8 << 20),
            files: Some(100),
            ..Limits::default()
        };
        assert_eq!(
            memory_layer(&limits),
            ChangeLayer::Memory {
                size_bytes: 8 << 20,
                inodes: Some(100)
            }
        );
        assert_eq!(
            memory_layer(&Limits::default()),
            ChangeLayer::Memory {
                size_bytes: Limits::default().tmp_bytes,
                inodes: None
            }
        );
    }
}
