//! The limits that keep the host alive ([limits] cpus, disk, files, and the free margin of the
//! state directory's filesystem): each attack exceeds the limit without airlock and is stopped
//! inside, as root and as an unprivileged user; a limit the kernel cannot enforce here is
//! refused, and accepted with --allow-degraded.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use support::sessions::new_session;
use support::*;

const PWNED: &str = "PWNED";

/// Two busy loops for about two seconds, then the wall time they had and the CPU time they
/// used (the shell's `times`, whose second line is its children's user and system time; run in
/// the shell itself, not in a subshell, which would have no children).
const CPU_HOG: &str = r#"s=$(date +%s%N); yes >/dev/null & a=$!; yes >/dev/null & b=$!; sleep 2; kill $a $b; wait; e=$(date +%s%N)
echo "wall_ns $((e - s))"; times"#;

/// CPU time used per wall-clock time, from [`CPU_HOG`]'s report.
fn cpus_used(out: &Output) -> f64 {
    let text = stdout(out);
    let wall_ns: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("wall_ns "))
        .unwrap_or_else(|| panic!("no wall time in {text:?} {}", stderr(out)))
        .parse()
        .unwrap();
    let children = text.lines().last().unwrap();
    // "0m1.230000s 0m0.450000s": user, then system.
    let seconds: f64 = children
        .split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum();
    seconds / (wall_ns / 1e9)
}

fn nice_inside(w: &World, extra: &[&str]) -> Output {
    // Field 19 of /proc/self/stat is the nice value; the second line tries to undo it.
    w.inside_with(
        extra,
        "cut -d' ' -f19 /proc/self/stat; renice -n 0 -p $$ >/dev/null 2>&1 && echo PWNED; true",
    )
}

#[test]
fn cpu_hog_is_held_to_cpus_as_root() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let profile = w.profile("[limits]\ncpus = 0.1\n");
    let outside = cpus_used(&w.outside(CPU_HOG));
    // Two busy loops take far more than a tenth of a CPU on any host with two, even a busy one
    // (0.38 seen here while other builds kept both CPUs busy).
    assert!(outside > 0.2, "outside the hog used only {outside} CPUs");
    let out = w.inside_with(&["--profile-file", &profile], CPU_HOG);
    ran(&out);
    let inside = cpus_used(&out);
    // A tenth of a CPU, with room for the accounting's ticks and the quota's periods.
    assert!(
        inside < 0.2,
        "the cpus limit did not hold: {inside} CPUs used"
    );
}

#[test]
fn cpus_without_a_cpu_cgroup_is_refused_unless_accepted() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let profile = w.profile("[limits]\ncpus = 0.5\n");
    let out = w.inside_with(&["--profile-file", &profile], "echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allow-degraded=cpus"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("ran"));
    // Accepted: it runs at nice 19, and cannot raise its priority again.
    let out = nice_inside(&w, &["--profile-file", &profile, "--allow-degraded=cpus"]);
    assert_eq!(ran(&out).lines().next(), Some("19"), "{}", stderr(&out));
    assert!(!stdout(&out).contains(PWNED), "the sandbox renice'd itself");
}

#[test]
fn without_a_cpu_cgroup_the_default_runs_at_nice_19() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let out = nice_inside(&w, &[]);
    assert_eq!(ran(&out).lines().next(), Some("19"), "{}", stderr(&out));
    assert!(!stdout(&out).contains(PWNED), "the sandbox renice'd itself");
}

/// A real-time scheduling class is outside both the cpu cgroup's CFS quota (without
/// RT_GROUP_SCHED, as most distributions build) and nice; RLIMIT_RTPRIO, inherited from the
/// caller, is what lets a process without CAP_SYS_NICE take one.
#[test]
fn an_inherited_rtprio_does_not_reach_the_sandbox() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let script = "grep 'Max realtime priority' /proc/self/limits; chrt -f 10 true && echo PWNED";
    let outside = w
        .command("prlimit")
        .args(["--rtprio=50:50", "sh", "-c", script])
        .output()
        .unwrap();
    if stderr(&outside).contains("Operation not permitted") {
        // Raising a hard limit needs CAP_SYS_RESOURCE, which some containers' root lacks
        // (this workplace's machines): the attack cannot be set up here.
        eprintln!(
            "skipped: cannot raise RLIMIT_RTPRIO here: {}",
            stderr(&outside)
        );
        return;
    }
    assert!(stdout(&outside).contains(PWNED), "{}", stderr(&outside));
    let mut cmd = w.command("prlimit");
    cmd.arg("--rtprio=50:50")
        .arg(airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .arg("run")
        .arg("--workspace")
        .arg(&w.workspace)
        .args(["--", "sh", "-c", script]);
    let out = cmd.output().unwrap();
    let text = ran(&out);
    assert!(!text.contains(PWNED), "the sandbox took a real-time class");
    let limit: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(limit[3..5], ["0", "0"], "{text}");
}

/// Writes 32 MiB into the current directory.
const DISK_FILLER: &str = "dd if=/dev/zero of=big bs=1M count=32 2>&1 && echo PWNED; rm -f big";
/// Makes 1000 files in the current directory.
const FILE_CREATOR: &str =
    "i=0; while [ $i -lt 1000 ]; do touch f$i || exit 1; i=$((i+1)); done; echo PWNED; rm -f f*";
/// The same, making 3,000: the inode watch's test sees the host filesystem's real free inodes
/// move with the tests beside it (files made and removed), so its 200 must be far from enough.
const MANY_FILES_CREATOR: &str =
    "i=0; while [ $i -lt 3000 ]; do touch f$i || exit 1; i=$((i+1)); done; echo PWNED; rm -f f*";

both_modes!(disk_filler_is_stopped_at_disk, |w: &World| {
    let profile = w.profile("[limits]\ndisk = \"8MiB\"\n");
    let cd_outside = format!("cd {} && {DISK_FILLER}", w.outside.display());
    assert!(stdout(&w.outside(&cd_outside)).contains(PWNED));
    let out = w.inside_with(&["--profile-file", &profile], DISK_FILLER);
    assert!(!ran(&out).contains(PWNED), "the disk limit did not hold");
    assert!(
        stdout(&out).contains("No space left on device"),
        "{}",
        stdout(&out)
    );
});

both_modes!(file_creator_is_stopped_at_files, |w: &World| {
    let profile = w.profile("[limits]\nfiles = 200\n");
    let cd_outside = format!("cd {} && {FILE_CREATOR}", w.outside.display());
    assert!(stdout(&w.outside(&cd_outside)).contains(PWNED));
    let out = w.inside_with(&["--profile-file", &profile], FILE_CREATOR);
    assert!(!ran(&out).contains(PWNED), "the files limit did not hold");
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
});

#[test]
fn disk_on_a_session_is_refused_unless_accepted() {
    // Unprivileged: no kernel quota bounds a session's directory.
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    for key in ["disk = \"1GiB\"", "files = 1000"] {
        let profile = w.profile(&format!("[limits]\n{key}\n"));
        let id = new_session(&w, &["--profile-file", &profile]);
        let out = w.inside_with(&["--session", &id], "echo ran");
        assert_eq!(out.status.code(), Some(125), "{key}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--allow-degraded=disk"),
            "{key}: {}",
            stderr(&out)
        );
        let out = w.inside_with(&["--session", &id, "--allow-degraded=disk"], "echo ran");
        assert_eq!(ran(&out).trim(), "ran", "{key}: {}", stderr(&out));
    }
}

/// Mounts under `dir`, from the host's mount table.
fn mounts_under(dir: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    table.lines().filter(|l| l.contains(dir)).count()
}

/// Unmounts whatever is still mounted under the state directory when the test ends, passed or
/// failed, so that a failure leaves no mount (nor its loop device) on the host.
struct UnmountAtEnd(std::path::PathBuf);

impl Drop for UnmountAtEnd {
    fn drop(&mut self) {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.0.to_string_lossy().into_owned();
        for target in table.lines().filter_map(|l| l.split(' ').nth(4)) {
            if target.starts_with(&dir) {
                let _ = std::process::Command::new("umount")
                    .args(["-l", target])
                    .status();
            }
        }
    }
}

#[test]
fn a_root_session_has_a_filesystem_of_its_own() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let _unmount = UnmountAtEnd(w.state.clone());
    let profile = w.profile("[limits]\ndisk = \"8MiB\"\nfiles = 200\n");
    let id = new_session(&w, &["--profile-file", &profile]);
    assert_eq!(mounts_under(&w.state), 1, "the session's image is mounted");
    // The kernel holds the layer to disk and files, with no --allow-degraded.
    let out = w.inside_with(&["--session", &id], DISK_FILLER);
    assert!(!ran(&out).contains(PWNED), "the disk limit did not hold");
    assert!(
        stdout(&out).contains("No space left on device"),
        "{}",
        stdout(&out)
    );
    // (Deleting what it made in the same run: a layer left without a free inode or block
    // cannot be mounted again, as overlayfs needs one for its work directory.)
    let out = w.inside_with(
        &["--session", &id],
        &format!("({FILE_CREATOR}); rm -f f*; echo kept > kept.txt"),
    );
    assert!(!ran(&out).contains(PWNED), "the files limit did not hold");
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
    // After a reboot the image is not mounted: the session mounts it again before its layer is
    // read, rather than showing an empty one.
    let layer = w.state.join("sessions").join(&id).join("layer");
    assert!(std::process::Command::new("umount")
        .arg(&layer)
        .status()
        .unwrap()
        .success());
    let out = w
        .airlock()
        .args(["diff", &id, "--name-status"])
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("kept.txt"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // Discard unmounts it; its loop device detaches itself.
    let out = w.airlock().args(["discard", &id]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        mounts_under(&w.state),
        0,
        "the session's image is still mounted"
    );
    assert!(!layer.with_file_name("layer.img").exists());
}

#[test]
fn gc_removes_what_a_killed_session_new_left_mounted() {
    // A `session new` killed after its image was mounted and before its record was saved
    // leaves a directory nothing can load, with a mount and a loop device. gc takes it once it
    // is older than any creation could be; a fresh one may be a creation under way.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let _unmount = UnmountAtEnd(w.state.clone());
    let profile = w.profile("[limits]\ndisk = \"8MiB\"\n");
    let old = new_session(&w, &["--profile-file", &profile]);
    let fresh = new_session(&w, &["--profile-file", &profile]);
    let sessions = w.state.join("sessions");
    for id in [&old, &fresh] {
        std::fs::remove_file(sessions.join(id).join("meta.json")).unwrap();
    }
    let touched = std::process::Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(sessions.join(&old))
        .status()
        .unwrap();
    assert!(touched.success());
    assert_eq!(mounts_under(&w.state), 2);
    // Without airlock's gc nothing knows of them.
    let listed = w.airlock().args(["sessions", "--json"]).output().unwrap();
    assert!(!stdout(&listed).contains(&old), "{}", stdout(&listed));
    let out = w.airlock().args(["gc"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("removed {old} (unfinished, workspace unknown)")),
        "{}",
        stdout(&out)
    );
    assert!(!sessions.join(&old).exists());
    assert!(sessions.join(&fresh).exists(), "a fresh one was taken");
    assert_eq!(
        mounts_under(&w.state),
        1,
        "the old one's image is still mounted"
    );
}

/// A session's run when the state directory's filesystem has only `room` bytes above its
/// margin (the debug build's test hook).
fn session_run_with_room(w: &World, id: &str, room: u64, script: &str) -> Output {
    let mut cmd = w.airlock_with_test_hooks();
    cmd.env("AIRLOCK_TEST_DISK_ROOM", room.to_string()).args([
        "run",
        "--session",
        id,
        "--",
        "sh",
        "-c",
        script,
    ]);
    cmd.output().unwrap()
}

/// 64 files of 1 MiB each.
const MANY_MIB: &str = "i=0; while [ $i -lt 64 ]; do head -c 1048576 /dev/zero > m$i || exit 1; i=$((i+1)); done; echo PWNED";

both_modes!(a_session_cannot_take_the_free_margin, |w: &World| {
    let id = new_session(w, &[]);
    let cd_outside = format!("cd {} && {MANY_MIB}", w.outside.display());
    assert!(stdout(&w.outside(&cd_outside)).contains(PWNED));
    // Many files: the supervisor's watch kills the run at the margin.
    let out = session_run_with_room(w, &id, 8 << 20, MANY_MIB);
    assert!(
        !stdout(&out).contains(PWNED),
        "the free margin did not hold"
    );
    assert_eq!(out.status.code(), Some(153), "{}", stderr(&out));
    assert!(stderr(&out).contains("free margin"), "{}", stderr(&out));
    // One big file: RLIMIT_FSIZE stops it at what is left, by the kernel.
    let out = session_run_with_room(w, &id, 8 << 20, DISK_FILLER);
    assert!(
        !stdout(&out).contains(PWNED),
        "the free margin did not hold"
    );
    // With room, the same session runs as usual.
    let out = session_run_with_room(w, &id, 1 << 30, "echo ran");
    assert_eq!(ran(&out).trim(), "ran", "{}", stderr(&out));
    // The audit log says which limit ended the run.
    let log = std::fs::read_to_string(w.state.join("audit.log")).unwrap();
    assert!(log.contains("\"limit\":\"disk\""), "{log}");
});

both_modes!(check_lists_each_limit, |w: &World| {
    let out = w.airlock().args(["check", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limits = report["limits"].as_array().unwrap();
    let by = |name: &str| {
        limits
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {limits:?}"))["enforced_by"]
            .clone()
    };
    assert_eq!(by("disk, files (throwaway run)"), "kernel");
    let images = w.mode == Mode::Root && std::path::Path::new("/dev/loop-control").exists();
    let session = if images { "kernel" } else { "refused" };
    assert_eq!(by("disk, files (session)"), session);
    assert_eq!(by("free margin"), "supervisor");
    // Root may write the cpu hierarchy where one is mounted; no user here may.
    let cpu_cgroup = std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
    let cpus = if w.mode == Mode::Root && cpu_cgroup {
        "kernel"
    } else {
        "refused"
    };
    assert_eq!(by("cpus"), cpus);
});

/// Takes 48 MiB of disk in one call without growing the file's size (fallocate --keep-size),
/// then 42 MiB more in six calls, each within the file size the limit allows. RLIMIT_FSIZE
/// bounds a file's size, not its blocks, and fallocate takes gigabytes in a millisecond: the
/// watch could only see it afterwards.
const FALLOCATE_FILLER: &str =
    ": > big; fallocate -n -l 48MiB big; for i in 1 2 3 4 5 6; do fallocate -l 7MiB f$i; done";
/// The bytes the filler's files hold on disk.
const HELD: &str = "n=0; for f in big f1 f2 f3 f4 f5 f6; do [ -e $f ] && n=$((n + $(stat -c %b $f))); done; echo \"held $((n * 512))\"";

fn held_bytes(out: &Output) -> u64 {
    let text = stdout(out);
    text.lines()
        .find_map(|l| l.strip_prefix("held "))
        .unwrap_or_else(|| panic!("no size in {text:?} {}", stderr(out)))
        .trim()
        .parse()
        .unwrap()
}

both_modes!(fallocate_cannot_pass_the_file_size_limit, |w: &World| {
    // Without airlock: an 8 MiB RLIMIT_FSIZE (ulimit counts 512-byte blocks) does not stop fallocate --keep-size.
    let outside = format!(
        "cd {} && ulimit -f 16384 && {FALLOCATE_FILLER}; {HELD}; rm -f big f?",
        w.outside.display()
    );
    assert!(held_bytes(&w.outside(&outside)) >= 90 << 20);
    // Inside a session with 8 MiB left above the margin: no more than that is taken.
    let id = new_session(w, &[]);
    // (The watch may kill the run right after the call: what it took is read in the next.)
    let out = session_run_with_room(w, &id, 8 << 20, FALLOCATE_FILLER);
    let held = held_bytes(&session_run_with_room(w, &id, 1 << 30, HELD));
    assert!(
        held <= 8 << 20,
        "fallocate took {held} bytes past the margin: {}",
        stderr(&out)
    );
});

/// A session's run when the state directory's filesystem has only `inodes` free above its
/// margin of inodes (the debug build's test hook).
fn session_run_with_inodes(w: &World, id: &str, inodes: u64, script: &str) -> Output {
    let mut cmd = w.airlock_with_test_hooks();
    cmd.env("AIRLOCK_TEST_INODE_ROOM", inodes.to_string())
        .args(["run", "--session", id, "--", "sh", "-c", script]);
    cmd.output().unwrap()
}

// Empty files take inodes, not bytes: a session without `files` could use up the host
// filesystem's inodes (no new file anywhere on it, the audit log's included) while the watch on
// free bytes saw nothing.
/// The inode watch reads the host filesystem's real free inodes, which rise when another test
/// deletes files: this test's other mode, run beside it, deletes its 3,000 (it failed so in CI).
static INODE_WATCH_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

both_modes!(a_session_cannot_take_the_free_inodes, |w: &World| {
    let _alone = INODE_WATCH_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let id = new_session(w, &[]);
    let cd_outside = format!("cd {} && {MANY_FILES_CREATOR}", w.outside.display());
    assert!(stdout(&w.outside(&cd_outside)).contains(PWNED));
    let out = session_run_with_inodes(w, &id, 200, MANY_FILES_CREATOR);
    assert!(
        !stdout(&out).contains(PWNED),
        "the free inodes did not hold"
    );
    assert_eq!(out.status.code(), Some(153), "{}", stderr(&out));
    let out = session_run_with_inodes(w, &id, 1 << 20, "echo ran");
    assert_eq!(ran(&out).trim(), "ran", "{}", stderr(&out));
});
