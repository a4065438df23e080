//! What a container does to airlock, reproduced on the host with the kernel's own means: a root
//! without CAP_SYS_ADMIN and CAP_NET_ADMIN (what Docker and Podman give a container's root), a
//! /proc with a masked path (what they do to /proc), a lower inherited hard limit (`--ulimit`).
//! scripts/test-container.sh does the same in a real Podman container.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;

use support::*;

/// The capabilities a container engine takes from its root, gone from the bounding set: root's
/// exec then gets every capability but these.
const CONTAINER_ROOT: &str = "--bounding-set=-sys_admin,-net_admin";

/// A program run as a container's root would be: uid 0 without CAP_SYS_ADMIN and CAP_NET_ADMIN.
fn as_container_root(w: &World, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = w.command("setpriv");
    cmd.args([CONTAINER_ROOT, "--"]).arg(program);
    cmd
}

/// `airlock --state-dir … run --workspace … -- sh -c script` as a container's root.
fn airlock_as_container_root(w: &World, extra: &[&str], script: &str) -> Command {
    let mut cmd = as_container_root(w, airlock_bin());
    cmd.arg("--state-dir").arg(&w.state);
    cmd.args(["run", "--workspace"]).arg(&w.workspace);
    cmd.args(extra).args(["--", "sh", "-c", script]);
    cmd
}

/// The same value written back to a kernel setting: harmless, but a write.
const REWRITE_SETTING: &str =
    "cat /proc/sys/kernel/domainname >/proc/sys/kernel/domainname && echo rewritten";

#[test]
fn a_root_without_cap_sys_admin_runs_as_an_unprivileged_user_would() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let out = airlock_as_container_root(
        &w,
        &[],
        "cat /proc/self/uid_map; grep CapEff /proc/self/status; id -u; echo made >made",
    )
    .output()
    .unwrap();
    let text = ran(&out);
    // The user-namespace way: the sandbox user mapped to the caller's own uid 0, one id only,
    // and no capability left.
    let map: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(map, ["1000", "0", "1"], "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("\n1000\n"), "{text}");
    // A throwaway run: the workspace is as it was.
    assert!(!w.workspace.join("made").exists());
}

#[test]
fn a_root_without_cap_sys_admin_cannot_write_the_kernels_settings_inside() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // Without airlock, such a root writes them: their files are root's, and most ask for no
    // capability.
    let direct = as_container_root(&w, "sh")
        .args(["-c", REWRITE_SETTING])
        .output()
        .unwrap();
    assert_eq!(stdout(&direct).trim(), "rewritten", "{}", stderr(&direct));
    // Inside, its sandbox user is that same uid 0: Landlock and a read-only /proc/sys stop it.
    let inside = airlock_as_container_root(&w, &[], REWRITE_SETTING)
        .output()
        .unwrap();
    assert!(
        !stdout(&inside).contains("rewritten"),
        "{}",
        stdout(&inside)
    );
    assert!(
        stderr(&inside).contains("Read-only file system"),
        "{}",
        stderr(&inside)
    );
}

both_modes!(proc_sys_is_read_only_inside, |w: &World| {
    let out = w.inside(REWRITE_SETTING);
    assert!(!stdout(&out).contains("rewritten"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("Read-only file system"),
        "{}",
        stderr(&out)
    );
});

#[test]
fn going_without_landlock_is_refused_to_a_root_without_cap_sys_admin() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let out = airlock_as_container_root(&w, &["--allow-degraded=landlock"], "echo ran")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!stdout(&out).contains("ran"));
    let err = stderr(&out);
    assert!(
        err.contains("--allow-degraded=landlock is refused") && err.contains("unprivileged user"),
        "{err}"
    );
}

#[test]
fn check_tells_a_root_without_cap_sys_admin_how_it_runs() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let out = as_container_root(&w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mapping = report["uid_mapping"].as_str().unwrap();
    assert!(mapping.contains("uid 0, this root's own"), "{mapping}");
    // The user namespace is probed, not assumed, for root too.
    let userns = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "user namespace")
        .unwrap();
    assert_eq!(userns["available"], true, "{userns}");
}

both_modes!(
    a_lower_inherited_hard_limit_is_kept_not_refused,
    |w: &World| {
        // As `podman run --ulimit nofile=1024:1024` gives it: below the profile's 4096, and no
        // capability to raise it.
        let mut cmd = w.command("prlimit");
        cmd.args(["--nofile=256:256", "--"]).arg(airlock_bin());
        cmd.arg("--state-dir").arg(&w.state);
        cmd.args(["run", "--", "sh", "-c", "ulimit -n; ulimit -Hn"]);
        let out = cmd.output().unwrap();
        assert_eq!(
            ran(&out).split_whitespace().collect::<Vec<_>>(),
            ["256", "256"]
        );
    }
);

/// `script` run as the identity under test in a mount namespace of its own where /proc has a
/// masked path, as in a container: a bind of /dev/null over /proc/timer_list (Podman's own mask).
fn with_masked_proc(w: &World, script: &str) -> std::process::Output {
    let identity = match w.mode {
        Mode::Root => String::new(),
        Mode::User => format!("setpriv --reuid={TEST_UID} --regid={TEST_UID} --clear-groups"),
    };
    let inner = format!(
        "mount --bind /dev/null /proc/timer_list && exec {identity} {bin} --state-dir {state} {script}",
        bin = airlock_bin().display(),
        state = w.state.display(),
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &inner])
        .env("PATH", TEST_PATH)
        .env("HOME", &w.home)
        .current_dir(&w.workspace)
        .output()
        .unwrap()
}

#[test]
fn a_masked_proc_is_named_by_check_and_run_refuses_with_the_same_reason() {
    // The kernel's rule (no new procfs where the mounted one is partly hidden) holds in a user
    // namespace only, which is where an unprivileged run and a container's root build.
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    if skip_unless_root("a masked /proc is made by a bind mount in a mount namespace") {
        return;
    }
    let check = with_masked_proc(&w, "check --json");
    assert_eq!(check.status.code(), Some(3), "{}", stderr(&check));
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let proc = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "private /proc")
        .unwrap();
    assert_eq!(proc["available"], false, "{proc}");
    assert!(
        proc["detail"].as_str().unwrap().contains("masked"),
        "{proc}"
    );
    assert_eq!(report["protection"], "none");

    let run = with_masked_proc(&w, "run -- echo ran");
    assert_eq!(run.status.code(), Some(125));
    assert!(!stdout(&run).contains("ran"));
    let err = stderr(&run);
    assert!(
        err.contains("/proc") && err.contains("masked paths"),
        "{err}"
    );
}

/// A seccomp filter of the kind a container engine installs, refusing one call that none of
/// `check`'s probes makes (pivot_root, x86-64's number 155), installed with python's ctypes;
/// then airlock is exec'd under it with the arguments given.
const UNDER_A_FILTER_REFUSING_PIVOT_ROOT: &str = r#"
import ctypes, os, struct, sys
ld_abs, jeq, ret = 0x20, 0x15, 0x06
program = [
    (ld_abs, 0, 0, 4), (jeq, 0, 3, 0xC000003E),  # not x86-64: allow
    (ld_abs, 0, 0, 0), (jeq, 0, 1, 155),
    (ret, 0, 0, 0x00050001),                       # pivot_root: EPERM
    (ret, 0, 0, 0x7FFF0000),
]
code = b"".join(struct.pack("HBBI", *insn) for insn in program)
buffer = ctypes.create_string_buffer(code)
fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(buffer))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.c_char_p(fprog)) == 0   # PR_SET_SECCOMP, FILTER
os.execv(sys.argv[1], sys.argv[1:])
"#;

#[cfg(target_arch = "x86_64")]
both_modes!(
    check_runs_a_trial_that_a_filter_no_probe_foresaw_fails,
    |w: &World| {
        let mut cmd = w.command("python3");
        cmd.args(["-c", UNDER_A_FILTER_REFUSING_PIVOT_ROOT])
            .arg(airlock_bin())
            .arg("--state-dir")
            .arg(&w.state);
        let check = cmd.args(["check", "--json"]).output().unwrap();
        assert_eq!(check.status.code(), Some(3), "{}", stderr(&check));
        let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
        let layers = report["layers"].as_array().unwrap();
        // Every probe passes: the filter refuses only what they do not try.
        let failed: Vec<&serde_json::Value> = layers
            .iter()
            .filter(|l| l["available"] == false && l["optional"] == false)
            .collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0]["name"], "trial run");
        let detail = failed[0]["detail"].as_str().unwrap();
        assert!(detail.contains("failed, so run refuses here"), "{detail}");
        assert_eq!(report["protection"], "none");
    }
);

#[test]
fn a_root_without_cap_sys_admin_cannot_change_the_hosts_device_nodes() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // The device nodes are the host's own inodes, root's: the sandbox's uid 0 is their owner,
    // and Landlock has no say over chmod, chown or utimes. Mode 0666 is theirs already: were it
    // allowed, nothing would change.
    let out = airlock_as_container_root(
        &w,
        &[],
        "for dev in null zero full random urandom tty; do \
           chmod 0666 /dev/$dev && echo changed $dev; touch /dev/$dev && echo touched $dev; \
         done; true",
    )
    .output()
    .unwrap();
    let text = ran(&out);
    assert!(
        !text.contains("changed") && !text.contains("touched"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("Read-only file system"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_root_without_cap_sys_admin_and_without_a_pids_cgroup_is_refused() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // The kernel never holds uid 0 of the initial namespace to RLIMIT_NPROC (fork() exempts
    // its user), so without a pids cgroup nothing would bound the sandbox's processes. An
    // empty tmpfs over /sys/fs/cgroup, as in a container with no cgroup of its own to write.
    let profile = w.profile("[limits]\nprocesses = 8\n");
    let inner = format!(
        "mount -t tmpfs none /sys/fs/cgroup && exec setpriv {CONTAINER_ROOT} -- {bin} \
         --state-dir {state} run --profile-file {profile} --workspace {ws} -- \
         sh -c 'for i in $(seq 1 30); do sleep 3 & done; sleep 1; ps -e --no-headers | wc -l'",
        bin = airlock_bin().display(),
        state = w.state.display(),
        ws = w.workspace.display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &inner])
        .env("PATH", TEST_PATH)
        .env("HOME", &w.home)
        .current_dir(&w.workspace)
        .output()
        .unwrap();
    let processes: u32 = stdout(&out).trim().parse().unwrap_or(0);
    assert!(
        processes <= 8,
        "{processes} processes ran under processes = 8"
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("RLIMIT_NPROC"), "{}", stderr(&out));
}

#[test]
fn a_session_is_read_only_the_way_it_was_made() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    std::fs::create_dir(w.workspace.join("d")).unwrap();
    w.write(&w.workspace.join("d/keep"), "keep");
    let id = support::sessions::new_session(&w, &[]);
    // Made the rootful way, the overlay's own xattrs are trusted.overlay.*: user.overlay.* is
    // the sandbox's to set, here the mark of an opaque directory.
    let forged = support::sessions::run_in(
        &w,
        &id,
        "python3 -c 'import os; os.setxattr(\"d\", \"user.overlay.opaque\", b\"y\")' \
         && echo new >d/new && echo forged",
    );
    assert!(ran(&forged).contains("forged"), "{}", stderr(&forged));
    // A root without CAP_SYS_ADMIN reads user.overlay.*: it must not take the forged mark for
    // the overlay's, neither in the diff nor in an apply that would delete d/keep.
    let diff = as_container_root(&w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["diff", &id])
        .output()
        .unwrap();
    assert!(!stdout(&diff).contains("deleted file"), "{}", stdout(&diff));
    let apply = as_container_root(&w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["apply", &id])
        .output()
        .unwrap();
    assert!(w.workspace.join("d/keep").exists(), "{}", stderr(&apply));
    assert_eq!(apply.status.code(), Some(125), "{}", stderr(&apply));
    assert!(
        stderr(&apply).contains("CAP_SYS_ADMIN"),
        "{}",
        stderr(&apply)
    );
}

#[test]
fn a_root_without_cap_sys_admin_cannot_read_what_proc_shows_only_root() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // Mode 0400, root's: the kernel's memory (slabinfo, kpageflags…) and the host's processes
    // (timer_list names them), read by owner's permission alone.
    let out = airlock_as_container_root(
        &w,
        &[],
        "for f in /proc/*; do [ -f \"$f\" ] && head -c1 \"$f\" >/dev/null 2>&1 && \
           [ \"$(stat -c %a \"$f\")\" = 400 ] && echo \"read $f\"; done; true",
    )
    .output()
    .unwrap();
    let text = ran(&out);
    assert!(!text.contains("read /proc/"), "{text}");
}

/// OPEN HOLE (found in review, not fixed): a sandbox whose uid is root's own owns what it writes
/// through a `read_write` bind as root on the host, and the owner may set the setuid bit
/// without a capability: a setuid-root program planted where any host user may run it. Nosuid
/// holds inside only. Ways out: the sandbox mapped to a dedicated uid (a container's root
/// has CAP_SETUID and CAP_CHOWN to map and chown to one), or seccomp refusing S_ISUID/S_ISGID
/// in chmod, fchmod, fchmodat(2), open/openat/creat modes and openat2.
#[test]
#[ignore = "open hole: a container root's sandbox plants setuid-root files through read_write binds"]
fn a_root_without_cap_sys_admin_cannot_plant_a_setuid_root_file_through_a_bind() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let shared = w.base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    let profile = w.profile(&format!(
        "[filesystem]\nread_write = [\"{}\"]\n",
        shared.display()
    ));
    let out = airlock_as_container_root(
        &w,
        &["--profile-file", &profile],
        &format!(
            "cp /usr/bin/id {dir}/id && chmod 4755 {dir}/id; true",
            dir = shared.display()
        ),
    )
    .output()
    .unwrap();
    ran(&out);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(shared.join("id")).map_or(0, |m| m.permissions().mode());
    assert_eq!(mode & 0o6000, 0, "a setuid file on the host: {mode:o}");
}
