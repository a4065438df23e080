//! The launch in two phases against the real kernel: a `Launching` dropped before its start
//! leaves nothing behind and its command never runs; started, the command runs; refused through
//! `Launching::refuse`, it never does; a setup process that fails has its own report returned.
//!
//! No test harness (`harness = false`): the jail clones its setup process only while the process
//! is single-threaded, so the cases run one after another in `main`.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use airlock_jail::{
    Bind, ChangeLayer, Degraded, IdMapping, JailError, Outcome, OverlayWorkspace, ResourceLimits,
    SandboxSpec, Way,
};

/// A scratch world: a workspace, a host directory bound read-write (where the command leaves
/// its mark), the staging directory and the cache.
struct World {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    marks: PathBuf,
    staging: PathBuf,
    cache: PathBuf,
    host_ids: (u32, u32),
}

impl World {
    fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("airlock-jail-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let world = World {
            workspace: dir.path().join("workspace"),
            marks: dir.path().join("marks"),
            staging: dir.path().join("mnt"),
            cache: dir.path().join("cache"),
            host_ids: if nix::unistd::geteuid().is_root() {
                (2_999_000, 2_999_000)
            } else {
                (
                    nix::unistd::geteuid().as_raw(),
                    nix::unistd::getegid().as_raw(),
                )
            },
            _dir: dir,
        };
        for dir in [&world.workspace, &world.marks, &world.staging, &world.cache] {
            std::fs::create_dir(dir).unwrap();
        }
        let (uid, gid) = world.host_ids;
        std::os::unix::fs::chown(&world.marks, Some(uid), Some(gid)).unwrap();
        world
    }

    /// `script` under /bin/sh, with `$MARKS` the read-write bind.
    fn spec(&self, script: &str, binds: Vec<Bind>) -> SandboxSpec {
        let (host_uid, host_gid) = self.host_ids;
        SandboxSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            way: Way::of_this_process(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("MARKS".into(), self.marks.clone().into()),
            ],
            cwd: self.workspace.clone(),
            ids: IdMapping {
                inside_uid: 1000,
                inside_gid: 1000,
                host_uid,
                host_gid,
            },
            workspace: OverlayWorkspace {
                lower: self.workspace.clone(),
                layer: ChangeLayer::Memory {
                    inodes: None,
                    size_bytes: 16 << 20,
                },
            },
            binds: [
                vec![Bind {
                    path: self.marks.clone(),
                    writable: true,
                }],
                binds,
            ]
            .concat(),
            hide: Vec::new(),
            limits: ResourceLimits {
                memory_bytes: 512 << 20,
                processes: 64,
                cpu_seconds: 30,
                open_files: 256,
                tmp_bytes: 16 << 20,
                timeout: Some(std::time::Duration::from_secs(30)),
                output_bytes: None,
                cpus: airlock_jail::CpuBandwidth {
                    millicpus: 1000,
                    explicit: false,
                },
                disk_guard: None,
            },
            degraded: Degraded::default(),
            hostname: "airlock".into(),
            user_name: "agent".into(),
            home: PathBuf::from("/home/agent"),
            network_gate: airlock_jail::NetworkGate::Absent,
            trust: None,
        }
    }

    fn marked(&self, name: &str) -> bool {
        self.marks.join(name).exists()
    }
}

fn freezer_dir(id: &airlock_jail::control::SandboxId) -> Option<&Path> {
    match id.freezer.as_ref()? {
        airlock_jail::control::Freezer::V1(dir) | airlock_jail::control::Freezer::V2(dir) => {
            Some(dir)
        }
    }
}

fn a_launching_dropped_before_its_start_leaves_nothing() {
    let world = World::new();
    let spec = world.spec("touch \"$MARKS/ran\"", Vec::new());
    let launching = airlock_jail::prepare(&spec, &world.staging, &world.cache, None).unwrap();
    let id = launching.id();
    assert!(id.is_alive(), "the setup process is there before the start");
    let cgroup = freezer_dir(&id).map(Path::to_path_buf);
    if let Some(dir) = &cgroup {
        assert!(dir.is_dir(), "{} exists before the start", dir.display());
    }
    drop(launching);
    assert!(!id.is_alive(), "the setup process outlived its Launching");
    if let Some(dir) = &cgroup {
        assert!(!dir.exists(), "{} outlived its Launching", dir.display());
    }
    assert!(!world.marked("ran"), "the command ran without its start");
}

fn a_started_launching_runs_its_command() {
    let world = World::new();
    let spec = world.spec("touch \"$MARKS/ran\"; exit 7", Vec::new());
    let launching = airlock_jail::prepare(&spec, &world.staging, &world.cache, None).unwrap();
    let before = launching.id();
    let mut sandbox = launching.start().unwrap();
    assert_eq!(
        sandbox.id(),
        before,
        "the kill switch's id changed at the start"
    );
    let finished = sandbox.wait().unwrap();
    sandbox.reap();
    assert_eq!(finished.outcome, Outcome::Exited(7));
    assert!(world.marked("ran"));
}

fn a_refusal_between_the_phases_stops_the_command() {
    let world = World::new();
    let spec = world.spec("touch \"$MARKS/ran\"", Vec::new());
    let launching = airlock_jail::prepare(&spec, &world.staging, &world.cache, None).unwrap();
    match Err::<(), _>(launching.refuse("the intent could not be written".to_string())) {
        Err(JailError::Refused(why)) => assert_eq!(why, "the intent could not be written"),
        Err(other) => panic!("refused with {other}"),
        Ok(_) => panic!("started although refused"),
    }
    assert!(!world.marked("ran"), "the command ran although refused");
}

fn a_setup_process_that_fails_has_its_report_returned() {
    let world = World::new();
    let missing = world.workspace.with_file_name("not-there");
    let bind = Bind {
        path: missing.clone(),
        writable: false,
    };
    let spec = world.spec("touch \"$MARKS/ran\"", vec![bind]);
    let launched = airlock_jail::prepare(&spec, &world.staging, &world.cache, None)
        .and_then(airlock_jail::Launching::start);
    match launched {
        Err(JailError::SetupReported(text)) => {
            assert!(text.contains(&*missing.to_string_lossy()), "{text}")
        }
        Err(other) => panic!("failed with {other:?}, not the setup process's report"),
        Ok(_) => panic!("started with a bind that does not exist"),
    }
    assert!(!world.marked("ran"));
}

/// A warm sandbox: prepared with no command, given one and its stdin at its start. The spec's
/// own command (which would leave "spec-ran") is never what runs, nor does it read the stdin
/// the sandbox inherited.
fn a_sandbox_prepared_without_its_command_runs_the_one_given_at_its_start() {
    let world = World::new();
    let spec = world.spec("touch \"$MARKS/spec-ran\"", Vec::new());
    let launching =
        airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None).unwrap();
    let command = airlock_jail::Command {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "pwd > \"$MARKS/given-ran\"; echo \"$GIVEN\" >> \"$MARKS/given-ran\"; \
             cat >> \"$MARKS/given-ran\"; exit 3"
                .into(),
        ],
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("MARKS".into(), world.marks.clone().into()),
            ("GIVEN".into(), "at the start".into()),
        ],
        cwd: world.workspace.join("sub"),
    };
    std::fs::create_dir(world.workspace.join("sub")).unwrap();
    let mut input = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut input, b"its stdin\n").unwrap();
    std::io::Seek::rewind(&mut input).unwrap();
    let mut sandbox = launching
        .start_command(&command, input.as_fd(), None)
        .unwrap();
    let finished = sandbox.wait().unwrap();
    sandbox.reap();
    assert_eq!(finished.outcome, Outcome::Exited(3));
    assert!(!world.marked("spec-ran"), "the spec's command ran");
    let written = std::fs::read_to_string(world.marks.join("given-ran")).unwrap();
    assert_eq!(
        written,
        format!(
            "{}\nat the start\nits stdin\n",
            world.workspace.join("sub").display()
        )
    );
}

/// Its wall-clock limit counts from the start, not from the preparation: a sandbox that waited
/// longer than its limit still runs its command whole; one that runs past it is stopped.
fn a_prepared_sandbox_counts_its_time_limit_from_its_start() {
    let world = World::new();
    let mut spec = world.spec("", Vec::new());
    spec.limits.timeout = Some(std::time::Duration::from_millis(300));
    let command = |script: &str| airlock_jail::Command {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cwd: world.workspace.clone(),
    };
    let limit = Some(std::time::Duration::from_secs(5));
    let launching =
        airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut sandbox = launching
        .start_command(&command("sleep 0.5"), devnull().as_fd(), limit)
        .unwrap();
    assert_eq!(sandbox.wait().unwrap().outcome, Outcome::Exited(0));
    sandbox.reap();
    let short = Some(std::time::Duration::from_millis(200));
    let launching =
        airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None).unwrap();
    let mut sandbox = launching
        .start_command(&command("sleep 5"), devnull().as_fd(), short)
        .unwrap();
    assert_eq!(sandbox.wait().unwrap().outcome, Outcome::TimedOut);
    sandbox.reap();
}

/// The two ways do not mix: a sandbox prepared with its command takes no other, one prepared
/// without takes no empty one and cannot be started without one; each refusal stops it.
fn a_prepared_sandbox_is_started_only_the_way_it_was_prepared() {
    let world = World::new();
    let spec = world.spec("touch \"$MARKS/ran\"", Vec::new());
    let other = airlock_jail::Command {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "touch \"$MARKS/other\"".into(),
        ],
        env: vec![("MARKS".into(), world.marks.clone().into())],
        cwd: world.workspace.clone(),
    };
    let launching = airlock_jail::prepare(&spec, &world.staging, &world.cache, None).unwrap();
    let id = launching.id();
    assert!(launching
        .start_command(&other, devnull().as_fd(), None)
        .is_err());
    assert!(!id.is_alive(), "a refused start left the setup process");
    let launching =
        airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None).unwrap();
    assert!(launching.start().is_err());
    let empty = airlock_jail::Command {
        argv: Vec::new(),
        ..other.clone()
    };
    let launching =
        airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None).unwrap();
    assert!(matches!(
        launching.start_command(&empty, devnull().as_fd(), None),
        Err(JailError::Refused(_))
    ));
    assert!(!world.marked("ran") && !world.marked("other"));
}

/// A given command that cannot be started ends as a cold one's does: 127 when it is nowhere to
/// be found, 126 when it may not be executed.
fn a_given_command_that_cannot_be_started_ends_as_a_shell_says() {
    let world = World::new();
    let spec = world.spec("", Vec::new());
    std::fs::write(world.workspace.join("not-executable"), "#!/bin/sh\n").unwrap();
    for (program, status) in [
        ("no-such-program", 127),
        ("/no/such/file", 127),
        ("./not-executable", 126),
    ] {
        let command = airlock_jail::Command {
            argv: vec![program.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: world.workspace.clone(),
        };
        let launching =
            airlock_jail::prepare_without_command(&spec, &world.staging, &world.cache, None)
                .unwrap();
        let mut sandbox = launching
            .start_command(&command, devnull().as_fd(), None)
            .unwrap();
        let outcome = sandbox.wait().unwrap().outcome;
        sandbox.reap();
        assert_eq!(outcome, Outcome::Exited(status), "{program}");
    }
}

/// What a command started with [`airlock_jail::Launching::start_command`] reads.
fn devnull() -> std::fs::File {
    std::fs::File::open("/dev/null").unwrap()
}

fn main() {
    let rootful = Way::of_this_process().is_rootful();
    // Unprivileged, a sandbox needs user namespaces and (for the memory layer) Linux 6.6; the
    // suite's sandbox tests run as root (scripts/test.sh), where nothing is skipped.
    if !rootful && !airlock_jail::memory_layer_supported(Way::of_this_process()) {
        eprintln!("skipped: unprivileged, this kernel has no memory layer for a sandbox");
        return;
    }
    let cases: [(&str, fn()); 8] = [
        (
            "a_launching_dropped_before_its_start_leaves_nothing",
            a_launching_dropped_before_its_start_leaves_nothing,
        ),
        (
            "a_started_launching_runs_its_command",
            a_started_launching_runs_its_command,
        ),
        (
            "a_refusal_between_the_phases_stops_the_command",
            a_refusal_between_the_phases_stops_the_command,
        ),
        (
            "a_setup_process_that_fails_has_its_report_returned",
            a_setup_process_that_fails_has_its_report_returned,
        ),
        (
            "a_sandbox_prepared_without_its_command_runs_the_one_given_at_its_start",
            a_sandbox_prepared_without_its_command_runs_the_one_given_at_its_start,
        ),
        (
            "a_prepared_sandbox_counts_its_time_limit_from_its_start",
            a_prepared_sandbox_counts_its_time_limit_from_its_start,
        ),
        (
            "a_prepared_sandbox_is_started_only_the_way_it_was_prepared",
            a_prepared_sandbox_is_started_only_the_way_it_was_prepared,
        ),
        (
            "a_given_command_that_cannot_be_started_ends_as_a_shell_says",
            a_given_command_that_cannot_be_started_ends_as_a_shell_says,
        ),
    ];
    for (name, case) in cases {
        case();
        println!("test {name} ... ok");
    }
    println!("test result: ok. {} passed", cases.len());
}
