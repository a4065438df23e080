//! The mounts of a sandbox's root as data: [`plan`] reads the spec (and, through [`HostFacts`],
//! what the host has) and makes no system call; `execute` carries the steps out. The tests below
//! check the plan's invariants without root.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::{MounterIds, DEVICES, SYSTEM_BIND, SYSTEM_DIRS};
use crate::beneath::Kind;
use crate::error::Result;
use crate::etc::ETC_BOUND;
use crate::spec::{Bind, ChangeLayer, SandboxSpec};
use crate::sys::MountAttrs;
use crate::trust::Trust;

/// One step of building the root. Paths are as the sandbox will see them, in the new root,
/// unless a variant says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MountStep {
    /// Every mount private (`MS_REC|MS_PRIVATE` on `/`): no mount event travels between the host
    /// and the sandbox.
    MakePrivate,
    /// Outside the new root: a small tmpfs on the host's staging directory, holding the new
    /// root's mount point and the scratch directory.
    StagingTmpfs,
    /// The new root: a fresh tmpfs, writable until [`MountStep::SealRoot`].
    RootTmpfs,
    /// A host directory bound at the same path, recursively, restricted with `attrs`.
    BindSystem { path: PathBuf, attrs: MountAttrs },
    /// The prepared /etc bound at /etc, restricted with `attrs`.
    BindEtc { attrs: MountAttrs },
    /// A symlink at `at` to `target`.
    Symlink { at: PathBuf, target: PathBuf },
    /// A directory (and its parents).
    Dir(PathBuf),
    /// A file of airlock's own, written into the root tmpfs (read-only once sealed), mode 0644.
    WriteFile { at: PathBuf, contents: String },
    /// The file `source` (inside the new root) bound over the file `at`, read-only, nosuid,
    /// nodev.
    BindFileOver { source: PathBuf, at: PathBuf },
    /// A tmpfs at `at` (made first, with its parents).
    Tmpfs {
        at: PathBuf,
        flags: MsFlags,
        options: String,
    },
    /// The host's /dev/`name` (a harmless character device) bound on an empty file; made
    /// read-only with /dev (see [`MountStep::Restrict`]).
    Device { name: &'static str },
    /// A private devpts instance at /dev/pts.
    Devpts,
    /// A private procfs at /proc, of the sandbox's pid namespace.
    Proc,
    /// The mount at `at`, and each mount below it so far, restricted with `attrs`.
    Restrict { at: PathBuf, attrs: MountAttrs },
    /// A profile path bound at the same path: cloned, restricted with `attrs` while detached,
    /// attached by fd on a mount point resolved beneath the new root.
    BindProfile {
        path: PathBuf,
        kind: Kind,
        attrs: MountAttrs,
    },
    /// The workspace overlay at the host workspace's path, its mount point resolved beneath the
    /// new root; its layers are attached outside the new root (scratch).
    Workspace {
        lower: PathBuf,
        layer: ChangeLayer,
        userxattr: bool,
    },
    /// The path made empty, if it exists (resolved beneath the new root): an empty read-only
    /// tmpfs over a directory, /dev/null over a file.
    Hide { path: PathBuf },
    /// `pivot_root` into the new root; the host's root detached.
    Pivot,
    /// After the pivot: `/` restricted with `attrs`.
    SealRoot { attrs: MountAttrs },
}

impl MountStep {
    /// Does this step find its mount point with openat2 `RESOLVE_IN_ROOT` (see `beneath`)? These
    /// are the steps whose `execute` takes the tree; everything that may sit in what a sandbox
    /// wrote (a kept session's layer, a read-write bind) must be one of them.
    #[cfg(test)]
    fn resolved_beneath(&self) -> bool {
        matches!(
            self,
            MountStep::BindProfile { .. } | MountStep::Workspace { .. } | MountStep::Hide { .. }
        )
    }
}

/// The steps of [`plan`], in the two runs the setup process makes of them (see `protocol`).
#[derive(Debug)]
pub(crate) struct MountPlan {
    /// Step 7 (base tree): everything but the workspace and the profile's paths, mounted while
    /// the supervisor makes the network namespace.
    pub base: Vec<MountStep>,
    /// Steps 9 (workspace) and 10 (pivot), once NAMESPACES has brought the user namespace that
    /// idmaps the workspace.
    pub workspace: Vec<MountStep>,
}

impl MountPlan {
    #[cfg(test)]
    fn steps(&self) -> impl Iterator<Item = &MountStep> {
        self.base.iter().chain(&self.workspace)
    }
}

/// What a system directory is on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SystemDir {
    Dir,
    /// Re-created inside as the same symlink (merged-/usr systems).
    Symlink(PathBuf),
    Absent,
}

/// What the plan needs to know of the host: the real one in `execute`, a fake in the tests.
pub(crate) trait HostFacts {
    fn system_dir(&self, path: &Path) -> Result<SystemDir>;
    /// A directory, following symlinks.
    fn is_dir(&self, path: &Path) -> bool;
    /// A regular file, not following symlinks.
    fn is_file(&self, path: &Path) -> bool;
    /// A profile path: a directory or something else; an error when it cannot be looked at.
    fn kind(&self, path: &Path) -> Result<Kind>;
}

/// `owner` owns the private tmpfs mounts, as the mounting process names it (see
/// [`MounterIds`]); `in_user_namespace`: unprivileged, overlayfs needs `userxattr`.
pub(crate) fn plan(
    spec: &SandboxSpec,
    owner: MounterIds,
    in_user_namespace: bool,
    host: &dyn HostFacts,
) -> Result<MountPlan> {
    Ok(MountPlan {
        base: base(spec, owner, host)?,
        workspace: workspace(spec, in_user_namespace, host)?,
    })
}

fn base(spec: &SandboxSpec, owner: MounterIds, host: &dyn HostFacts) -> Result<Vec<MountStep>> {
    let mut steps = vec![
        MountStep::MakePrivate,
        MountStep::StagingTmpfs,
        MountStep::RootTmpfs,
    ];
    for dir in SYSTEM_DIRS {
        let path = PathBuf::from(dir);
        match host.system_dir(&path)? {
            SystemDir::Symlink(target) => steps.push(MountStep::Symlink { at: path, target }),
            SystemDir::Dir => steps.push(MountStep::BindSystem {
                path,
                attrs: SYSTEM_BIND,
            }),
            SystemDir::Absent => {}
        }
    }
    steps.push(MountStep::BindEtc { attrs: SYSTEM_BIND });
    for entry in ETC_BOUND {
        let path = Path::new("/etc").join(entry);
        if host.is_dir(&path) {
            steps.push(MountStep::BindSystem {
                path,
                attrs: SYSTEM_BIND,
            });
        }
    }
    if let Some(trust) = &spec.trust {
        trust_store(&mut steps, trust, host);
    }
    dev(&mut steps);
    steps.push(MountStep::Proc);
    let private = |at: &Path, mode: u32| MountStep::Tmpfs {
        at: at.to_path_buf(),
        flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        options: format!(
            "mode={mode:o},size={},uid={},gid={}",
            spec.limits.tmp_bytes, owner.uid, owner.gid
        ),
    };
    steps.push(private(Path::new("/tmp"), 0o1777));
    steps.push(private(&spec.home, 0o700));
    steps.push(MountStep::Dir(PathBuf::from("/var")));
    steps.push(MountStep::Symlink {
        at: PathBuf::from("/var/tmp"),
        target: PathBuf::from("../tmp"),
    });
    Ok(steps)
}

/// The run's CA and bundle in /run/airlock, the bundle bound over each distribution bundle the
/// host has (a symlink to one is left alone: it leads to another that is bound). After /etc's
/// live directories, which the bundles are in.
fn trust_store(steps: &mut Vec<MountStep>, trust: &Trust, host: &dyn HostFacts) {
    steps.push(MountStep::Dir(crate::trust::dir().to_path_buf()));
    for (at, contents) in crate::trust::files(trust) {
        steps.push(MountStep::WriteFile { at, contents });
    }
    for bundle in crate::trust::SYSTEM_BUNDLES {
        let at = PathBuf::from(bundle);
        if host.is_file(&at) {
            steps.push(MountStep::BindFileOver {
                source: PathBuf::from(crate::trust::TRUST_BUNDLE),
                at,
            });
        }
    }
}

/// A minimal /dev, read-only once filled, its device nodes with it (PERF: one call for all):
/// its tmpfs is the sandbox user's when mounted in a user namespace; a private devpts and
/// /dev/shm are mounts of their own, made after, writable.
fn dev(steps: &mut Vec<MountStep>) {
    steps.push(MountStep::Tmpfs {
        at: PathBuf::from("/dev"),
        flags: MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        options: "mode=0755,size=64k".into(),
    });
    steps.extend(DEVICES.iter().map(|&name| MountStep::Device { name }));
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        steps.push(MountStep::Symlink {
            at: Path::new("/dev").join(link),
            target: PathBuf::from(target),
        });
    }
    steps.push(MountStep::Dir(PathBuf::from("/dev/pts")));
    steps.push(MountStep::Dir(PathBuf::from("/dev/shm")));
    steps.push(MountStep::Restrict {
        at: PathBuf::from("/dev"),
        attrs: MountAttrs {
            read_only: true,
            no_suid: true,
            no_dev: false,
            no_exec: true,
        },
    });
    steps.push(MountStep::Devpts);
    steps.push(MountStep::Tmpfs {
        at: PathBuf::from("/dev/shm"),
        flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        options: "mode=1777,size=64m".into(),
    });
}

fn workspace(
    spec: &SandboxSpec,
    in_user_namespace: bool,
    host: &dyn HostFacts,
) -> Result<Vec<MountStep>> {
    // Outer binds before inner ones, so none hides another; binds that contain the workspace
    // before its overlay, binds inside it after; hides last, over everything.
    let mut binds: Vec<&Bind> = spec.binds.iter().collect();
    binds.sort_by_key(|bind| bind.path.components().count());
    let lower = &spec.workspace.lower;
    let (inner, outer): (Vec<&Bind>, Vec<&Bind>) = binds
        .into_iter()
        .partition(|bind| bind.path.starts_with(lower));
    let bind = |bind: &Bind| -> Result<MountStep> {
        Ok(MountStep::BindProfile {
            path: bind.path.clone(),
            kind: host.kind(&bind.path)?,
            attrs: MountAttrs {
                read_only: !bind.writable,
                ..SYSTEM_BIND
            },
        })
    };
    let mut steps = outer.into_iter().map(bind).collect::<Result<Vec<_>>>()?;
    steps.push(MountStep::Workspace {
        lower: lower.clone(),
        layer: spec.workspace.layer.clone(),
        userxattr: in_user_namespace,
    });
    for inside in inner {
        steps.push(bind(inside)?);
    }
    steps.extend(
        spec.hide
            .iter()
            .map(|path| MountStep::Hide { path: path.clone() }),
    );
    // SECURITY: the root tmpfs holds the mount points and symlinks; nothing may change it once
    // the sandbox is in it.
    steps.push(MountStep::Pivot);
    steps.push(MountStep::SealRoot { attrs: SYSTEM_BIND });
    Ok(steps)
}

#[cfg(test)]
mod tests {
    //! The plan's invariants, checked on specs with a fake host: no root, no mount.
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::spec::{Degraded, IdMapping, OverlayWorkspace, ResourceLimits};

    /// A merged-/usr host with /etc/ssl/certs; every profile path is a directory but
    /// `/srv/config.toml`.
    struct FakeHost;

    impl HostFacts for FakeHost {
        fn system_dir(&self, path: &Path) -> Result<SystemDir> {
            Ok(match path.to_str() {
                Some("/usr") => SystemDir::Dir,
                Some(link @ ("/bin" | "/sbin" | "/lib" | "/lib64")) => {
                    SystemDir::Symlink(Path::new("usr").join(&link[1..]))
                }
                _ => SystemDir::Absent,
            })
        }

        fn is_dir(&self, path: &Path) -> bool {
            path == Path::new("/etc/ssl/certs")
        }

        fn is_file(&self, path: &Path) -> bool {
            path == Path::new("/etc/ssl/certs/ca-certificates.crt")
        }

        fn kind(&self, path: &Path) -> Result<Kind> {
            Ok(if path.ends_with("config.toml") {
                Kind::File
            } else {
                Kind::Dir
            })
        }
    }

    const OWNER: MounterIds = MounterIds {
        uid: 1000,
        gid: 1000,
    };

    fn spec(binds: &[(&str, bool)], hide: &[&str]) -> SandboxSpec {
        SandboxSpec {
            argv: vec!["true".into()],
            way: crate::privilege::Way::Rootful,
            env: Vec::new(),
            cwd: PathBuf::from("/work/app"),
            ids: IdMapping {
                inside_uid: 1000,
                inside_gid: 1000,
                host_uid: 4242,
                host_gid: 4242,
            },
            workspace: OverlayWorkspace {
                lower: PathBuf::from("/work/app"),
                layer: ChangeLayer::Memory {
                    inodes: None,
                    size_bytes: 1 << 20,
                },
            },
            binds: binds
                .iter()
                .map(|(path, writable)| Bind {
                    path: PathBuf::from(path),
                    writable: *writable,
                })
                .collect(),
            hide: hide.iter().map(PathBuf::from).collect(),
            limits: ResourceLimits {
                memory_bytes: 1 << 30,
                processes: 64,
                cpu_seconds: 60,
                open_files: 256,
                tmp_bytes: 1 << 20,
                timeout: None,
                output_bytes: None,
                cpus: crate::spec::CpuBandwidth {
                    millicpus: 1000,
                    explicit: false,
                },
                disk_guard: None,
            },
            degraded: Degraded::default(),
            hostname: "airlock".into(),
            user_name: "agent".into(),
            home: PathBuf::from("/home/agent"),
            network_gate: crate::NetworkGate::Absent,
            trust: None,
        }
    }

    /// A profile with binds outside, around and inside the workspace, read-only and read-write,
    /// given deepest first, and hides.
    fn busy_spec() -> SandboxSpec {
        spec(
            &[
                ("/work/app/vendor/cache", true),
                ("/work/app/vendor", false),
                ("/opt/tools", false),
                ("/var/cache/pip", true),
                ("/srv/config.toml", false),
                ("/work", false),
            ],
            &["/work/app/.env", "/opt/tools/secrets"],
        )
    }

    fn steps(spec: &SandboxSpec) -> Vec<MountStep> {
        plan(spec, OWNER, true, &FakeHost)
            .unwrap()
            .steps()
            .cloned()
            .collect()
    }

    /// The mounts of the finished root, as the sandbox sees them: path → writable.
    fn final_mounts(steps: &[MountStep]) -> BTreeMap<PathBuf, bool> {
        let mut mounts = BTreeMap::new();
        for step in steps {
            let mut set = |path: &Path, writable: bool| {
                mounts.insert(path.to_path_buf(), writable);
            };
            match step {
                MountStep::RootTmpfs => set(Path::new("/"), true),
                MountStep::BindSystem { path, attrs } => set(path, !attrs.read_only),
                MountStep::BindEtc { attrs } => set(Path::new("/etc"), !attrs.read_only),
                MountStep::Tmpfs { at, flags, .. } => set(at, !flags.contains(MsFlags::MS_RDONLY)),
                MountStep::Device { name } => set(&Path::new("/dev").join(name), true),
                MountStep::Devpts => set(Path::new("/dev/pts"), true),
                MountStep::Proc => set(Path::new("/proc"), true),
                MountStep::Restrict { at, attrs } => {
                    for (path, writable) in mounts.iter_mut() {
                        if path.starts_with(at) {
                            *writable = !attrs.read_only;
                        }
                    }
                }
                MountStep::BindProfile { path, attrs, .. } => set(path, !attrs.read_only),
                MountStep::Workspace { lower, .. } => set(lower, true),
                // Read-only, as `execute` mounts it.
                MountStep::Hide { path } => set(path, false),
                MountStep::SealRoot { attrs } => set(Path::new("/"), !attrs.read_only),
                MountStep::BindFileOver { at, .. } => set(at, false),
                MountStep::MakePrivate
                | MountStep::WriteFile { .. }
                | MountStep::StagingTmpfs
                | MountStep::Symlink { .. }
                | MountStep::Dir(_)
                | MountStep::Pivot => {}
            }
        }
        mounts
    }

    fn position(steps: &[MountStep], wanted: impl Fn(&MountStep) -> bool) -> Vec<usize> {
        steps
            .iter()
            .enumerate()
            .filter(|(_, step)| wanted(step))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn nothing_is_writable_but_the_workspace_the_private_tmpfs_and_the_named_binds() {
        let spec = busy_spec();
        let writable: BTreeSet<PathBuf> = final_mounts(&steps(&spec))
            .into_iter()
            .filter(|(_, writable)| *writable)
            .map(|(path, _)| path)
            .collect();
        let expected: BTreeSet<PathBuf> = [
            "/work/app",
            "/work/app/vendor/cache",
            "/var/cache/pip",
            "/tmp",
            "/home/agent",
            "/dev/shm",
            // A private instance and the sandbox's own procfs; the device nodes are
            // read-only with /dev (their metadata cannot change; their reads and writes do not
            // need a writable mount).
            "/dev/pts",
            "/proc",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(writable, expected);
    }

    #[test]
    fn system_content_is_bound_read_only_nosuid_nodev() {
        for step in steps(&busy_spec()) {
            if let MountStep::BindSystem { attrs, .. } | MountStep::BindEtc { attrs } = step {
                assert!(attrs.read_only && attrs.no_suid && attrs.no_dev, "{step:?}");
            }
            if let MountStep::BindProfile { attrs, .. } = step {
                assert!(attrs.no_suid && attrs.no_dev, "{step:?}");
            }
        }
    }

    #[test]
    fn the_root_is_made_read_only_last_right_after_the_pivot() {
        let steps = steps(&busy_spec());
        let n = steps.len();
        assert_eq!(steps[n - 2], MountStep::Pivot);
        match &steps[n - 1] {
            MountStep::SealRoot { attrs } => assert!(attrs.read_only),
            other => panic!("last step {other:?}"),
        }
        assert_eq!(position(&steps, |s| *s == MountStep::Pivot).len(), 1);
        // And the new root's tmpfs is the second tmpfs of all, after the staging one.
        assert_eq!(
            steps[..3],
            [
                MountStep::MakePrivate,
                MountStep::StagingTmpfs,
                MountStep::RootTmpfs
            ]
        );
    }

    #[test]
    fn hides_come_after_every_bind_and_the_workspace() {
        let steps = steps(&busy_spec());
        let hides = position(&steps, |s| matches!(s, MountStep::Hide { .. }));
        let mounts = position(&steps, |s| {
            !matches!(
                s,
                MountStep::Hide { .. } | MountStep::Pivot | MountStep::SealRoot { .. }
            )
        });
        assert_eq!(hides.len(), 2);
        assert!(hides.iter().all(|hide| mounts.iter().all(|m| m < hide)));
    }

    #[test]
    fn binds_go_outer_before_inner_and_the_workspace_between() {
        let steps = steps(&busy_spec());
        let order: Vec<&Path> = steps
            .iter()
            .filter_map(|step| match step {
                MountStep::BindProfile { path, .. } => Some(path.as_path()),
                MountStep::Workspace { lower, .. } => Some(lower.as_path()),
                _ => None,
            })
            .collect();
        let at = |path: &str| order.iter().position(|p| *p == Path::new(path)).unwrap();
        assert!(at("/work") < at("/work/app"));
        assert!(at("/work/app") < at("/work/app/vendor"));
        assert!(at("/work/app/vendor") < at("/work/app/vendor/cache"));
        // No mount hides an earlier one that lies beneath it, except the hides.
        for (i, outer) in order.iter().enumerate() {
            for inner in &order[..i] {
                assert!(
                    !inner.starts_with(outer) || inner == outer,
                    "{outer:?} over {inner:?}"
                );
            }
        }
    }

    #[test]
    fn what_a_sandbox_may_have_written_is_reached_only_beneath_the_new_root() {
        let plan = plan(&busy_spec(), OWNER, true, &FakeHost).unwrap();
        // Profile paths, the workspace and the hides: mount points found with RESOLVE_IN_ROOT,
        // all in the second run, none in the base, whose paths are airlock's own.
        assert!(plan.base.iter().all(|step| !step.resolved_beneath()));
        for step in &plan.workspace {
            assert!(
                step.resolved_beneath()
                    || matches!(step, MountStep::Pivot | MountStep::SealRoot { .. }),
                "{step:?}"
            );
        }
        let lower = Path::new("/work/app");
        for step in &plan.base {
            let at = match step {
                MountStep::BindSystem { path, .. } => Some(path),
                MountStep::Tmpfs { at, .. }
                | MountStep::Symlink { at, .. }
                | MountStep::Restrict { at, .. }
                | MountStep::Dir(at) => Some(at),
                _ => None,
            };
            assert!(at.is_none_or(|at| !at.starts_with(lower)), "{step:?}");
        }
    }

    #[test]
    fn nothing_of_the_host_is_shown_but_what_is_named() {
        let spec = busy_spec();
        let mut shown: BTreeSet<PathBuf> = BTreeSet::new();
        for step in steps(&spec) {
            match step {
                MountStep::BindSystem { path, .. } | MountStep::BindProfile { path, .. } => {
                    shown.insert(path);
                }
                MountStep::Device { name } => {
                    shown.insert(Path::new("/dev").join(name));
                }
                MountStep::Workspace { lower, .. } => {
                    shown.insert(lower);
                }
                _ => {}
            }
        }
        let mut named: BTreeSet<PathBuf> = spec.binds.iter().map(|b| b.path.clone()).collect();
        named.extend(["/usr", "/etc/ssl/certs", "/work/app"].map(PathBuf::from));
        named.extend(DEVICES.iter().map(|name| Path::new("/dev").join(name)));
        assert_eq!(shown, named);
    }

    #[test]
    fn dev_is_read_only_once_filled_and_the_private_tmpfs_belong_to_the_sandbox_user() {
        let steps = steps(&busy_spec());
        let restrict = position(&steps, |s| matches!(s, MountStep::Restrict { .. }));
        assert_eq!(restrict.len(), 1);
        let filled = position(&steps, |s| match s {
            MountStep::Device { .. } => true,
            MountStep::Symlink { at, .. } | MountStep::Dir(at) => at.starts_with("/dev/"),
            _ => false,
        });
        assert!(filled.iter().all(|i| *i < restrict[0]));
        // The writable mounts of /dev come after it, or they would be made read-only with it.
        let own = position(&steps, |s| match s {
            MountStep::Devpts => true,
            MountStep::Tmpfs { at, .. } => at == Path::new("/dev/shm"),
            _ => false,
        });
        assert_eq!(own.len(), 2);
        assert!(own.iter().all(|i| *i > restrict[0]));
        let mounts = final_mounts(&steps);
        for name in DEVICES {
            assert_eq!(mounts.get(&Path::new("/dev").join(name)), Some(&false));
        }
        for at in ["/tmp", "/home/agent"] {
            let found = steps.iter().any(|s| match s {
                MountStep::Tmpfs {
                    at: here, options, ..
                } => here == Path::new(at) && options.ends_with(",uid=1000,gid=1000"),
                _ => false,
            });
            assert!(found, "{at}");
        }
    }

    #[test]
    fn merged_usr_links_are_made_not_bound_and_userxattr_follows_the_namespace() {
        let steps = steps(&spec(&[], &[]));
        assert!(steps.contains(&MountStep::Symlink {
            at: PathBuf::from("/bin"),
            target: PathBuf::from("usr/bin"),
        }));
        assert!(!steps
            .iter()
            .any(|s| matches!(s, MountStep::BindSystem { path, .. } if path == Path::new("/bin"))));
        let rootful = plan(&spec(&[], &[]), OWNER, false, &FakeHost).unwrap();
        assert!(rootful.steps().any(|s| matches!(
            s,
            MountStep::Workspace {
                userxattr: false,
                ..
            }
        )));
    }

    #[test]
    fn the_trust_store_is_written_then_bound_read_only_over_the_system_bundle() {
        let mut with_trust = spec(&[], &[]);
        with_trust.trust = Some(Trust {
            ca_pem: "CA".into(),
            bundle_pem: "ROOTS\nCA".into(),
        });
        let steps = steps(&with_trust);
        let written = position(&steps, |s| matches!(s, MountStep::WriteFile { .. }));
        let bound = position(&steps, |s| matches!(s, MountStep::BindFileOver { .. }));
        let certs_dir = position(
            &steps,
            |s| matches!(s, MountStep::BindSystem { path, .. } if path == Path::new("/etc/ssl/certs")),
        );
        assert_eq!(written.len(), 2);
        // Only the bundle the host has, after the live directory it is in and after the
        // files it is bound from.
        assert_eq!(bound.len(), 1);
        assert!(certs_dir[0] < bound[0] && written[1] < bound[0]);
        assert!(steps.contains(&MountStep::WriteFile {
            at: PathBuf::from(crate::trust::TRUST_BUNDLE),
            contents: "ROOTS\nCA".into(),
        }));
        let mounts = final_mounts(&steps);
        assert_eq!(
            mounts.get(Path::new("/etc/ssl/certs/ca-certificates.crt")),
            Some(&false)
        );
        // The files are in the root, which is sealed read-only.
        assert_eq!(mounts.get(Path::new("/")), Some(&false));
        // Without trust: nothing of it.
        let plain = self::steps(&spec(&[], &[]));
        assert!(!plain.iter().any(|s| matches!(
            s,
            MountStep::WriteFile { .. } | MountStep::BindFileOver { .. }
        )));
    }
}
