//! The sandbox's /etc: a small allowlist of the host's files plus generated passwd, group, hosts
//! and hostname. Building it per run cost ~0.4 ms (a copy or bind per file), so the supervisor
//! keeps it ready in a cache directory, keyed by everything it is made from, and each run binds
//! that one directory read-only. Directories that change on their own (certificates,
//! alternatives) are bound live on top instead of copied.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::error::{JailError, PathContext, Result, UNEXPECTED};
use crate::rootfs::io_error;
use crate::spec::SandboxSpec;

/// Host files of /etc copied into the sandbox (symlinks are copied as symlinks). Never shadow,
/// ssh, sudoers, the host's passwd/group (generated instead), nor /etc/ssl/private.
pub const ETC_COPIED: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "nsswitch.conf",
    "gai.conf",
    "host.conf",
    "localtime",
    "timezone",
    "protocols",
    "services",
    "mime.types",
    "os-release",
    "profile",
    "bash.bashrc",
    "inputrc",
    "ssl/openssl.cnf",
    "ca-certificates.conf",
];

/// Host directories of /etc bound read-only, live.
pub const ETC_BOUND: &[&str] = &["ssl/certs", "pki/tls/certs", "pki/ca-trust", "alternatives"];

/// Files larger than this are not copied: nothing on the allowlist should be this large.
const COPY_LIMIT: u64 = 4 << 20;

fn generated(spec: &SandboxSpec) -> Vec<(&'static str, String)> {
    let (uid, gid) = (spec.ids.inside_uid, spec.ids.inside_gid);
    vec![
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n{user}:x:{uid}:{gid}:airlock sandbox:{home}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                user = spec.user_name,
                home = spec.home.display()
            ),
        ),
        ("group", format!("root:x:0:\n{user}:x:{gid}:\nnogroup:x:65534:\n", user = spec.user_name)),
        ("hostname", format!("{}\n", spec.hostname)),
        ("hosts", format!("127.0.0.1\tlocalhost {h}\n::1\tlocalhost ip6-localhost {h}\n", h = spec.hostname)),
        (
            "resolv.conf",
            if spec.network_gate.gated() {
                // The supervisor answers here (see `gate`).
                "nameserver 127.0.0.53\noptions edns0\n".to_string()
            } else {
                String::new()
            },
        ),
    ]
}

/// A key for everything the cached /etc is made of: what each source is now (type, size, time,
/// inode) and the generated content. Any change makes a new cache entry.
fn cache_key(spec: &SandboxSpec) -> u64 {
    let mut hasher = DefaultHasher::new();
    for entry in ETC_COPIED.iter().chain(ETC_BOUND) {
        entry.hash(&mut hasher);
        match fs::symlink_metadata(Path::new("/etc").join(entry)) {
            Ok(meta) => (
                meta.mode(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ino(),
                meta.dev(),
            )
                .hash(&mut hasher),
            Err(_) => "missing".hash(&mut hasher),
        }
    }
    generated(spec).hash(&mut hasher);
    hasher.finish()
}

/// A prepared /etc, locked (shared) for as long as a sandbox uses it: the cleanup of stale
/// entries takes an exclusive lock, so it never deletes one a running sandbox has bound.
pub(crate) struct PreparedEtc {
    pub dir: PathBuf,
    _in_use: Flock<fs::File>,
}

/// Every entry holds this file; one without it was deleted under our feet.
const MARKER: &str = "passwd";

/// This run's /etc, built if needed. `cache_root` must be reachable by no sandbox.
pub(crate) fn prepare(cache_root: &Path, spec: &SandboxSpec) -> Result<PreparedEtc> {
    let dir = cache_root.join(format!("etc-{:016x}", cache_key(spec)));
    for _ in 0..3 {
        if !dir.join(MARKER).is_file() {
            build_entry(cache_root, &dir, spec)?;
            // A new entry means the host's /etc changed: the others are stale now.
            remove_stale(cache_root, &dir);
        }
        let handle = fs::File::open(&dir).map_err(|e| io_error("open", &dir, e))?;
        let lock = Flock::lock(handle, FlockArg::LockShared)
            .map_err(|(_, errno)| errno)
            .on_path("lock", &dir, UNEXPECTED)?;
        if dir.join(MARKER).is_file() {
            return Ok(PreparedEtc { dir, _in_use: lock });
        }
    }
    Err(JailError::EtcCacheUnstable {
        entry: dir,
        cache: cache_root.to_owned(),
    })
}

fn build_entry(cache_root: &Path, dir: &Path, spec: &SandboxSpec) -> Result<()> {
    fs::create_dir_all(cache_root).map_err(|e| io_error("create", cache_root, e))?;
    let tmp = cache_root.join(format!(".etc-{}-{:x}", std::process::id(), cache_key(spec)));
    let _ = fs::remove_dir_all(&tmp);
    build(&tmp, spec)?;
    // Another run may have built the same entry meanwhile; either copy is as good.
    if let Err(e) = fs::rename(&tmp, dir) {
        let _ = fs::remove_dir_all(&tmp);
        if !dir.join(MARKER).is_file() {
            return Err(io_error("create", dir, e));
        }
    }
    Ok(())
}

/// Entries for an /etc that no longer exists are garbage, unless a running sandbox holds one.
fn remove_stale(cache_root: &Path, current: &Path) {
    let Ok(entries) = fs::read_dir(cache_root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == current || !entry.file_name().to_string_lossy().starts_with("etc-") {
            continue;
        }
        let Ok(handle) = fs::File::open(&path) else {
            continue;
        };
        if let Ok(_unused) = Flock::lock(handle, FlockArg::LockExclusiveNonblock) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn build(dir: &Path, spec: &SandboxSpec) -> Result<()> {
    let mkdir = |path: &Path| -> Result<()> {
        fs::create_dir_all(path).map_err(|e| io_error("create", path, e))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .map_err(|e| io_error("chmod", path, e))
    };
    mkdir(dir)?;
    for entry in ETC_COPIED {
        let host = Path::new("/etc").join(entry);
        let Ok(meta) = fs::symlink_metadata(&host) else {
            continue;
        };
        let dst = dir.join(entry);
        if let Some(parent) = dst.parent() {
            mkdir(parent)?;
        }
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&host).map_err(|e| io_error("read link", &host, e))?;
            symlink(&target, &dst).map_err(|e| io_error("create", &dst, e))?;
        } else if meta.is_file() && meta.len() <= COPY_LIMIT {
            // fs::copy keeps the host file's mode: nothing becomes more readable than it was.
            fs::copy(&host, &dst).map_err(|e| io_error("copy", &host, e))?;
        }
    }
    // Mount points for the live directories.
    for entry in ETC_BOUND {
        if Path::new("/etc").join(entry).is_dir() {
            mkdir(&dir.join(entry))?;
        }
    }
    for (name, content) in generated(spec) {
        let path = dir.join(name);
        fs::write(&path, content).map_err(|e| io_error("write", &path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .map_err(|e| io_error("chmod", &path, e))?;
    }
    Ok(())
}
