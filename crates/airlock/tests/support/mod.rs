//! Test harness: runs the real airlock binary as root and as an unprivileged user, and runs the
//! same attack directly on the host as the same identity, so every test can show the attack
//! working without airlock and failing inside it.
#![allow(dead_code)]

pub mod api;
pub mod pki;
pub mod servers;
pub mod sessions;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// An unprivileged uid with no passwd entry: setpriv needs none, and nothing on the host belongs
/// to it, so whatever it reaches it reaches as "other".
pub const TEST_UID: u32 = 4242;
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Root,
    User,
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True when a test that needs root must be skipped here, having said why. Where the environment
/// says root is required (`AIRLOCK_TEST_REQUIRE_ROOT=1`, as CI sets it), it fails instead: a
/// suite that silently skipped its root tests would prove nothing there.
pub fn skip_unless_root(why: &str) -> bool {
    if is_root() {
        return false;
    }
    if std::env::var_os("AIRLOCK_TEST_REQUIRE_ROOT").is_some_and(|v| v == "1") {
        panic!("this test needs root ({why}), and AIRLOCK_TEST_REQUIRE_ROOT=1 says it must not be skipped: run the suite as root");
    }
    eprintln!("skipped: {why}");
    true
}

/// The binary under test, copied where an unprivileged uid can execute it (the build tree may sit
/// under a directory only root can enter): `$AIRLOCK_TEST_BIN` when set (scripts/test.sh sets it
/// to the release binary scripts/build.sh makes, the one users run), else the one cargo built for
/// these tests.
pub fn airlock_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("AIRLOCK_TEST_BIN") {
        Some(path) => reachable_copy(Path::new(&path)),
        None => reachable_copy(Path::new(env!("CARGO_BIN_EXE_airlock"))),
    })
}

/// The debug build cargo made for these tests, which alone honours the `AIRLOCK_TEST_*` hooks
/// (a failing last check, a crash at a chosen step, a kernel without Landlock); release builds
/// compile them out.
pub fn airlock_bin_with_test_hooks() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| reachable_copy(Path::new(env!("CARGO_BIN_EXE_airlock"))))
}

/// One copy per build of the binary, reused by every test process and run; written under a
/// temporary name and renamed into place. Copies of builds older than a day are removed, so that
/// /tmp does not fill up with them.
fn reachable_copy(source: &Path) -> PathBuf {
    let meta = std::fs::metadata(source)
        .unwrap_or_else(|e| panic!("the airlock binary under test, {}: {e}", source.display()));
    let stamp = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join("airlock-test-bin");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join(format!("airlock-{}-{stamp}", meta.len()));
    if !bin.exists() {
        let tmp = dir.join(format!(".airlock-{}", std::process::id()));
        std::fs::copy(source, &tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
        let day = std::time::Duration::from_secs(24 * 3600);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let old = entry
                .metadata()
                .and_then(|meta| meta.modified())
                .is_ok_and(|time| time.elapsed().is_ok_and(|age| age > day));
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    bin
}

/// One test's world: a workspace, a place outside it, a home and a state dir, all owned by the
/// identity that runs airlock.
pub struct World {
    pub mode: Mode,
    _root: tempfile::TempDir,
    pub base: PathBuf,
    pub workspace: PathBuf,
    pub outside: PathBuf,
    pub home: PathBuf,
    pub state: PathBuf,
}

impl World {
    /// None when this mode cannot be tested here (root tests need root).
    pub fn new(mode: Mode) -> Option<World> {
        if mode == Mode::Root && skip_unless_root("root mode needs the tests to run as root") {
            return None;
        }
        let root = tempfile::Builder::new()
            .prefix("airlock-test-")
            .tempdir()
            .unwrap();
        let base = root.path().to_path_buf();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let world = World {
            mode,
            workspace: base.join("workspace"),
            outside: base.join("outside"),
            home: base.join("home"),
            state: base.join("state"),
            base,
            _root: root,
        };
        for dir in [&world.workspace, &world.outside, &world.home, &world.state] {
            std::fs::create_dir_all(dir).unwrap();
            world.give(dir);
        }
        Some(world)
    }

    /// Hand a path to the identity under test.
    pub fn give(&self, path: &Path) {
        if self.mode == Mode::User && is_root() {
            std::os::unix::fs::chown(path, Some(TEST_UID), Some(TEST_UID)).unwrap();
        }
    }

    /// Write a file and hand it to the identity under test.
    pub fn write(&self, path: &Path, content: &str) {
        std::fs::write(path, content).unwrap();
        self.give(path);
    }

    /// A command run as the identity under test, with a minimal environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = if self.mode == Mode::User && is_root() {
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={TEST_UID}"))
                .arg(format!("--regid={TEST_UID}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            cmd
        } else {
            Command::new(program)
        };
        cmd.env_clear()
            .env("PATH", TEST_PATH)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        cmd
    }

    /// `airlock --state-dir …`, as the identity under test, not yet started.
    pub fn airlock(&self) -> Command {
        let mut cmd = self.command(airlock_bin());
        cmd.arg("--state-dir").arg(&self.state);
        cmd
    }

    /// [`World::airlock`] with the build that honours the `AIRLOCK_TEST_*` hooks.
    pub fn airlock_with_test_hooks(&self) -> Command {
        let mut cmd = self.command(airlock_bin_with_test_hooks());
        cmd.arg("--state-dir").arg(&self.state);
        cmd
    }

    /// `airlock --state-dir … run --workspace … <extra> -- sh -c script`, not yet started.
    pub fn airlock_sh(&self, extra: &[&str], script: &str) -> Command {
        let mut cmd = self.airlock();
        cmd.arg("run").arg("--workspace").arg(&self.workspace);
        cmd.args(extra).args(["--", "sh", "-c", script]);
        cmd
    }

    pub fn inside(&self, script: &str) -> Output {
        self.airlock_sh(&[], script).output().unwrap()
    }

    pub fn inside_with(&self, extra: &[&str], script: &str) -> Output {
        self.airlock_sh(extra, script).output().unwrap()
    }

    /// The same script run directly on the host, as the same identity.
    pub fn outside(&self, script: &str) -> Output {
        self.command("sh").args(["-c", script]).output().unwrap()
    }

    /// A profile named `name`, where the identity under test looks profiles up by name
    /// (`$HOME/.config/airlock/profiles`): for `-p NAME` and tokens bound to it.
    pub fn named_profile(&self, name: &str, toml: &str) {
        let config = self.home.join(".config");
        let profiles = config.join("airlock/profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        for dir in [&config, &config.join("airlock"), &profiles] {
            self.give(dir);
        }
        self.write(&profiles.join(format!("{name}.toml")), toml);
    }

    /// A profile file outside the workspace.
    pub fn profile(&self, toml: &str) -> String {
        let path = self.base.join("profile.toml");
        self.write(&path, toml);
        path.to_str().unwrap().to_string()
    }
}

/// Poll `done` until it holds, for at most `within`.
#[track_caller]
pub fn wait_for(what: &str, within: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Is a process whose whole command line matches `pattern` (pgrep -f) running on the host?
pub fn process_running(pattern: &str) -> bool {
    Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .unwrap()
        .status
        .success()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assert the run succeeded as a run (airlock itself did not refuse) and print what it said.
#[track_caller]
pub fn ran(out: &Output) -> String {
    let code = out.status.code();
    assert_ne!(
        code,
        Some(125),
        "airlock refused or failed: {}",
        stderr(out)
    );
    stdout(out)
}

/// Both root and unprivileged-user variants of one test: its body, or a function of that name
/// (`both_modes!(name);` before `fn name(w: &World)`).
#[macro_export]
macro_rules! both_modes {
    ($name:ident) => {
        $crate::both_modes!($name, $name);
    };
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn as_root() {
                if let Some(world) = World::new(Mode::Root) {
                    ($body)(&world)
                }
            }
            #[test]
            fn as_user() {
                if let Some(world) = World::new(Mode::User) {
                    ($body)(&world)
                }
            }
        }
    };
}
