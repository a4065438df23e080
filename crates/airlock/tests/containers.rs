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

/// A program run as the root of a user namespace (a rootless or `--userns` container's root):
/// uid 0 with every capability in a namespace whose uid 0 is the unprivileged test uid on the
/// host. The world is that uid's (its files are this root's).
fn as_user_namespace_root(w: &World, program: impl AsRef<std::ffi::OsStr>) -> Command {
    assert_eq!(w.mode, Mode::User);
    let mut cmd = w.command("unshare");
    cmd.args(["--user", "--map-root-user", "--"]).arg(program);
    cmd
}

/// `airlock --state-dir … run --workspace … -- sh -c script` as a user namespace's root.
fn airlock_as_user_namespace_root(w: &World, extra: &[&str], script: &str) -> Command {
    let mut cmd = as_user_namespace_root(w, airlock_bin());
    cmd.arg("--state-dir").arg(&w.state);
    cmd.args(["run", "--workspace"]).arg(&w.workspace);
    cmd.args(extra).args(["--", "sh", "-c", script]);
    cmd
}

/// The same value written back to a kernel setting: harmless, but a write.
const REWRITE_SETTING: &str =
    "cat /proc/sys/kernel/domainname >/proc/sys/kernel/domainname && echo rewritten";

#[test]
fn a_user_namespaces_root_runs_as_an_unprivileged_user_would() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let out = airlock_as_user_namespace_root(
        &w,
        &[],
        "cat /proc/self/uid_map; grep CapEff /proc/self/status; id -u; echo made >made",
    )
    .output()
    .unwrap();
    let text = ran(&out);
    // The user-namespace way: the sandbox user mapped to the caller's own uid 0 (the test uid
    // on the host), one id only, and no capability left.
    let map: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(map, ["1000", "0", "1"], "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("\n1000\n"), "{text}");
    // A throwaway run: the workspace is as it was.
    assert!(!w.workspace.join("made").exists());
}

#[test]
fn the_hosts_root_without_cap_sys_admin_is_refused() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // The host's uid 0 without capabilities (a rootful container's root) still writes the
    // kernel's settings: their files are root's, and most ask for no capability. A sandbox on
    // that uid would own the host's files and device nodes, could make what it writes through a
    // writable bind setuid-root, and the kernel never holds it to RLIMIT_NPROC.
    let direct = as_container_root(&w, "sh")
        .args(["-c", REWRITE_SETTING])
        .output()
        .unwrap();
    assert_eq!(stdout(&direct).trim(), "rewritten", "{}", stderr(&direct));
    // Apart from the world, where the profile is (a writable bind there is refused).
    let apart = tempfile::tempdir().unwrap();
    let shared = apart.path().to_path_buf();
    let profile = w.profile(&format!(
        "[filesystem]\nread_write = [\"{}\"]\n",
        shared.display()
    ));
    let plant = format!(
        "cp /usr/bin/id {dir}/id && chmod 4755 {dir}/id; echo ran",
        dir = shared.display()
    );
    let inside = airlock_as_container_root(&w, &["--profile-file", &profile], &plant)
        .output()
        .unwrap();
    assert_eq!(inside.status.code(), Some(125));
    assert!(!stdout(&inside).contains("ran"));
    assert!(!shared.join("id").exists());
    let err = stderr(&inside);
    assert!(
        err.contains("the host's root") && err.contains("--userns=auto"),
        "{err}"
    );
    // check says so too: its trial run is refused.
    let check = as_container_root(&w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["check", "--json"])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(3));
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert!(report["uid_mapping"].as_str().unwrap().starts_with("none:"));
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
fn going_without_landlock_is_refused_to_a_user_namespaces_root() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let out = airlock_as_user_namespace_root(&w, &["--allow-degraded=landlock"], "echo ran")
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
fn check_tells_a_user_namespaces_root_how_it_runs() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let out = as_user_namespace_root(&w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mapping = report["uid_mapping"].as_str().unwrap();
    assert!(mapping.contains("this user namespace's root"), "{mapping}");
    // Every layer run needs is there. Without a cgroup of its own (none is delegated here) the
    // cgroups line says partial and some limits are refused: the verdict says so too, and so
    // does the exit status.
    let less = |key: &str, says: &dyn Fn(&serde_json::Value) -> bool| {
        report[key].as_array().unwrap().iter().any(says)
    };
    let partial = less("layers", &|l| l["available"] == false)
        || less("limits", &|l| l["enforced_by"] == "refused");
    let expected = if partial { "partial" } else { "full" };
    assert_eq!(report["protection"], expected, "{report}");
    assert_eq!(
        out.status.code(),
        Some(if partial { 4 } else { 0 }),
        "{report}"
    );
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

// The device nodes are the host's own inodes: bound read-only, their metadata cannot change
// (Landlock has no say over chmod, chown or utimes), while reads and writes still work. They are
// made read-only with /dev, and the private devpts and /dev/shm, mounted after, stay writable.
both_modes!(device_nodes_are_bound_read_only, |w: &World| {
    let out = w.inside(
        "for dev in null zero full random urandom tty; do \
           grep \" /dev/$dev \" /proc/self/mountinfo | cut -d' ' -f6; done; echo x >/dev/null && echo wrote; \
         for own in pts shm; do grep \" /dev/$own \" /proc/self/mountinfo | cut -d' ' -f6 | sed \"s/^/$own /\"; done; \
         echo y >/dev/shm/y && echo shm-written",
    );
    let text = ran(&out);
    let flags: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(',') && !l.contains(' '))
        .collect();
    assert_eq!(flags.len(), 6, "{text}");
    assert!(flags.iter().all(|f| f.starts_with("ro,")), "{text}");
    assert!(text.contains("wrote"), "{text}");
    assert!(text.contains("\npts rw,"), "{text}");
    assert!(text.contains("\nshm rw,"), "{text}");
    assert!(text.contains("shm-written"), "{text}");
});

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

// /proc's files that only their owner may read (the kernel's memory: slabinfo, kpageflags…; the
// host's processes by name: timer_list) are covered: what the owner's uid could read is hidden
// from a sandbox whose uid might be that owner.
// Each is a read-only, nodev mount, which cannot be opened: the first hidden is made so, the
// others take its flags by being bound from it.
both_modes!(what_proc_shows_only_root_is_hidden, |w: &World| {
    let out = w.inside(
        "for f in /proc/kmsg /proc/timer_list /proc/slabinfo; do \
           [ -c $f ] && echo \"hidden $f\"; cat $f >/dev/null 2>&1 || echo \"unread $f\"; \
         done; awk '$5 ~ /^\\/proc\\/(kmsg|timer_list|slabinfo)$/ { print \"mount\", $5, $6 }' \
         /proc/self/mountinfo; true",
    );
    let text = ran(&out);
    for file in ["/proc/kmsg", "/proc/timer_list", "/proc/slabinfo"] {
        assert!(text.contains(&format!("hidden {file}")), "{text}");
        assert!(text.contains(&format!("unread {file}")), "{text}");
        let mount = text
            .lines()
            .find(|line| line.starts_with(&format!("mount {file} ")))
            .unwrap_or_else(|| panic!("no mount at {file}: {text}"));
        let options: Vec<&str> = mount.rsplit(' ').next().unwrap().split(',').collect();
        assert!(options.contains(&"ro"), "{mount}");
        assert!(options.contains(&"nodev"), "{mount}");
    }
});
