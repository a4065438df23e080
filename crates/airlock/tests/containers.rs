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
