//! For each layer, an attempt that succeeds without airlock and fails inside it, as root and as an
//! unprivileged user. Each script prints PWNED when the attack worked.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;

use support::*;

const PWNED: &str = "PWNED";

#[track_caller]
fn works_outside_fails_inside(world: &World, script: &str) {
    let outside = world.outside(script);
    assert!(
        stdout(&outside).contains(PWNED),
        "the attack must work without airlock, or this test proves nothing: {}{}",
        stdout(&outside),
        stderr(&outside)
    );
    let inside = world.inside(script);
    let said = ran(&inside);
    assert!(
        !said.contains(PWNED),
        "attack worked inside the sandbox: {said}{}",
        stderr(&inside)
    );
}

both_modes!(read_a_secret_file_outside_the_workspace, |w: &World| {
    let secret = w.outside.join("id_rsa");
    w.write(&secret, "canary-secret");
    works_outside_fails_inside(
        w,
        &format!("cat {} | grep -q canary && echo {PWNED}", secret.display()),
    );
});

both_modes!(see_etc_shadow, |w: &World| {
    works_outside_fails_inside(w, &format!("test -e /etc/shadow && echo {PWNED}"));
});

both_modes!(see_home_directories, |w: &World| {
    works_outside_fails_inside(w, &format!("test -e /root && echo {PWNED}"));
});

both_modes!(write_outside_the_workspace, |w: &World| {
    let target = w.outside.join("dropped");
    let script = format!("echo evil > {} && echo {PWNED}", target.display());
    works_outside_fails_inside(w, &format!("{script}; rm -f {}", target.display()));
    w.inside(&script);
    assert!(!target.exists(), "the sandbox wrote outside its workspace");
});

both_modes!(write_the_host_workspace_directly, |w: &World| {
    let file = w.workspace.join("notes.txt");
    w.write(&file, "original");
    let out =
        w.inside("echo changed > notes.txt && rm -f gone && echo new > created && cat notes.txt");
    assert_eq!(
        ran(&out).trim(),
        "changed",
        "inside sees its own change: {}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "original",
        "host workspace was written"
    );
    assert!(
        !w.workspace.join("created").exists(),
        "host workspace was written"
    );
});

/// A process on the host owned by the identity under test, for the sandbox to try to reach.
fn host_victim(w: &World) -> std::process::Child {
    w.command("sleep").arg("300").spawn().unwrap()
}

both_modes!(see_host_processes, |w: &World| {
    let mut victim = host_victim(w);
    let pid = victim.id();
    works_outside_fails_inside(w, &format!("test -d /proc/{pid} && echo {PWNED}"));
    victim.kill().unwrap();
    victim.wait().unwrap();
});

both_modes!(signal_a_host_process, |w: &World| {
    let mut victim = host_victim(w);
    let pid = victim.id();
    let out = w.inside(&format!("kill -TERM {pid} && echo {PWNED}"));
    assert!(!ran(&out).contains(PWNED));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the sandbox killed a host process"
    );
    let out = w.outside(&format!("kill -TERM {pid} && echo {PWNED}"));
    assert!(
        stdout(&out).contains(PWNED),
        "the same signal works from the host"
    );
    victim.wait().unwrap();
});

both_modes!(ptrace_a_process, |w: &World| {
    // Attach to our own child: allowed on the host for any user, refused inside.
    let script = format!(
        r#"python3 -c '
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
if libc.ptrace(16, pid, 0, 0) == 0:
    print("{PWNED}")
os.kill(pid, 9)
'"#
    );
    works_outside_fails_inside(w, &script);
});

both_modes!(reach_a_tcp_port_on_host_loopback, |w: &World| {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"{PWNED}\")'"
    );
    works_outside_fails_inside(w, &script);
    drop(listener);
});

both_modes!(connect_to_a_host_unix_socket, |w: &World| {
    let path = w.outside.join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = format!(
        "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"{PWNED}\")'",
        path.display()
    );
    works_outside_fails_inside(w, &script);
    drop(listener);
});

both_modes!(connect_to_a_host_abstract_unix_socket, |w: &World| {
    let name = format!(
        "airlock-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    );
    let script = format!(
        "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\"); print(\"{PWNED}\")'"
    );
    // Bind from Python too (std has no abstract-socket API on stable), kept alive for the test.
    let mut server = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(\"\\0{name}\"); s.listen(8); print(\"up\", flush=True); time.sleep(60)"
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 2];
    server.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    works_outside_fails_inside(w, &script);
    server.kill().unwrap();
    server.wait().unwrap();
});

both_modes!(mount_a_filesystem, |w: &World| {
    // Outside, any user can mount inside a mount namespace of its own (never on the host's tree:
    // this test runs as root too).
    works_outside_fails_inside(
        w,
        &format!("unshare -rm sh -c 'mount -t tmpfs none /mnt && echo {PWNED}'"),
    );
    // Inside, mounting directly is refused as well.
    let out = w.inside(&format!("mount -t tmpfs none /tmp && echo {PWNED}"));
    assert!(!ran(&out).contains(PWNED));
});

both_modes!(create_a_user_namespace, |w: &World| {
    works_outside_fails_inside(w, &format!("unshare -U true && echo {PWNED}"));
});

both_modes!(use_io_uring, |w: &World| {
    let script = format!(
        r#"python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
if libc.syscall(425, 8, params) >= 0:
    print("{PWNED}")
'"#
    );
    works_outside_fails_inside(w, &script);
});

both_modes!(inject_terminal_input_with_tiocsti, |w: &World| {
    // A terminal of our own made our controlling tty, then TIOCSTI pushes a byte into its input.
    let script = format!(
        r#"python3 -c '
import os, fcntl, termios
m, s = os.openpty()
name = os.ttyname(s)
if os.fork() == 0:
    os.setsid()
    fd = os.open(name, os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        print("{PWNED}", flush=True)
    except OSError as e:
        print("refused", e, flush=True)
    os._exit(0)
os.wait()
'"#
    );
    works_outside_fails_inside(w, &script);
});

both_modes!(read_a_secret_environment_variable, |w: &World| {
    let script = format!("test \"$AIRLOCK_TEST_SECRET\" = canary && echo {PWNED}");
    let outside = w
        .command("sh")
        .args(["-c", &script])
        .env("AIRLOCK_TEST_SECRET", "canary")
        .output()
        .unwrap();
    assert!(stdout(&outside).contains(PWNED));
    let inside = w
        .airlock_sh(&[], &script)
        .env("AIRLOCK_TEST_SECRET", "canary")
        .output()
        .unwrap();
    assert!(
        !ran(&inside).contains(PWNED),
        "a secret of the caller's environment reached the sandbox"
    );
});

both_modes!(use_a_leaked_file_descriptor, |w: &World| {
    let secret = w.outside.join("token");
    w.write(&secret, "canary-token");
    let attack = format!("cat <&7 | grep -q canary && echo {PWNED}");
    let outside = w.outside(&format!("exec 7<{}; {attack}", secret.display()));
    assert!(stdout(&outside).contains(PWNED));
    // The caller leaks fd 7 into airlock; the sandboxed command must not get it.
    let airlock = airlock_bin().display().to_string();
    let inside = w.outside(&format!(
        "exec 7<{}; {airlock} --state-dir {} run -w {} -- sh -c '{attack}'",
        secret.display(),
        w.state.display(),
        w.workspace.display()
    ));
    assert!(
        !ran(&inside).contains(PWNED),
        "leaked fd reached the sandbox: {}",
        stderr(&inside)
    );
});

both_modes!(keep_a_daemon_alive_after_the_run, |w: &World| {
    let marker = format!("{}.{}", 4000 + std::process::id() % 1000, w.mode as u8 + 1);
    let script = format!("setsid sleep {marker} < /dev/null > /dev/null 2>&1 & echo started");
    let out = w.inside(&script);
    assert!(ran(&out).contains("started"));
    let alive = |m: &str| process_running(&format!("^sleep {m}$"));
    assert!(
        !alive(&marker),
        "a daemon started in the sandbox outlived the run"
    );
    // Without airlock the same daemon survives its parent.
    w.outside(&script);
    wait_for(
        "the daemon must survive without airlock, or this test proves nothing",
        std::time::Duration::from_secs(10),
        || alive(&marker),
    );
    std::process::Command::new("pkill")
        .args(["-f", &format!("^sleep {marker}$")])
        .status()
        .unwrap();
});

both_modes!(fork_bomb, |w: &World| {
    let profile = w.profile("[limits]\nprocesses = 64\ntimeout = \"20s\"\n");
    // Outside, the same user can start far more processes than the sandbox allows.
    let many = format!(
        "for i in $(seq 100); do sleep 2 & done; echo {PWNED}; kill $(jobs -p) 2>/dev/null; wait"
    );
    assert!(stdout(&w.outside(&many)).contains(PWNED));
    let out = w.inside_with(&["--profile-file", &profile], &many);
    assert!(!ran(&out).contains(PWNED), "the process limit did not hold");
    // A real fork bomb ends inside its limits, and the host still forks afterwards.
    let out = w.inside_with(
        &["--profile-file", &profile],
        "b() { b | b & }; b; sleep 3; echo done",
    );
    assert_ne!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(std::process::Command::new("true")
        .status()
        .unwrap()
        .success());
});

both_modes!(exhaust_memory, |w: &World| {
    let profile = w.profile("[limits]\nmemory = \"256MiB\"\n");
    let script = format!("python3 -c 'b = bytearray(768 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); print(\"{PWNED}\")'");
    let outside = w.outside(&script);
    assert!(stdout(&outside).contains(PWNED), "{}", stderr(&outside));
    let inside = w.inside_with(&["--profile-file", &profile], &script);
    assert!(
        !ran(&inside).contains(PWNED),
        "the memory limit did not hold"
    );
    assert_ne!(inside.status.code(), Some(0));
    if inside.status.code() == Some(137) {
        // Killed by the kernel (the run's memory cgroup): the user is told why, not left with
        // a bare 137.
        assert!(
            stderr(&inside).contains("the memory limit was reached"),
            "{}",
            stderr(&inside)
        );
    }
});

// Syscalls the seccomp filter refuses that the host allows any user, called directly.
both_modes!(seccomp_refuses_kernel_attack_surface, |w: &World| {
    let script = r#"python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = libc.syscall(*args)
    print(name, "ok" if r >= 0 else os.strerror(ctypes.get_errno()))
call("keyctl", 250, 0, ctypes.c_long(-3), 0)
call("netlink", 41, 16, 3, 0)
handle = ctypes.create_string_buffer(128)
ctypes.memmove(handle, (128).to_bytes(4, "little"), 4)
mount_id = ctypes.c_int()
call("name_to_handle_at", 303, -100, b"/usr", handle, ctypes.byref(mount_id), 0)
'"#;
    let outside = stdout(&w.outside(script));
    for name in ["keyctl", "netlink", "name_to_handle_at"] {
        assert!(
            outside.contains(&format!("{name} ok")),
            "{name} must work on the host: {outside}"
        );
    }
    let inside = w.inside(script);
    let said = ran(&inside);
    for name in ["keyctl", "netlink", "name_to_handle_at"] {
        assert!(
            said.contains(&format!("{name} Operation not permitted")),
            "{name} not refused: {said}{}",
            stderr(&inside)
        );
    }
});

// clone3 hides its flags from seccomp, so it must fail with ENOSYS (libc then falls back to
// clone, whose flags are checked), and threads must still work.
both_modes!(clone3_is_enosys_and_threads_still_work, |w: &World| {
    let script = r#"python3 -c '
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
args = ctypes.create_string_buffer(88)
r = libc.syscall(435, args, 88)
print("clone3", os.strerror(ctypes.get_errno()) if r < 0 else "ok")
t = threading.Thread(target=lambda: print("thread ran")); t.start(); t.join()
'"#;
    let out = w.inside(script);
    let said = ran(&out);
    assert!(
        said.contains("clone3 Function not implemented"),
        "{said}{}",
        stderr(&out)
    );
    assert!(said.contains("thread ran"), "{said}");
});

both_modes!(nothing_else_of_the_host_exists, |w: &World| {
    // airlock's state (where layers and the /etc cache live) and host runtime sockets.
    let state = w.state.display();
    works_outside_fails_inside(w, &format!("test -e {state} && echo {PWNED}"));
    works_outside_fails_inside(w, &format!("test -e /var/run -o -e /run && echo {PWNED}"));
    let out = w.inside("ls -A /");
    let allowed = [
        "bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp",
        "usr", "var",
    ];
    let top = ran(&out);
    for entry in top.split_whitespace() {
        assert!(
            allowed.contains(&entry),
            "unexpected /{entry} in the sandbox root: {top}"
        );
    }
    let out = w.inside("ls -A /etc /dev /var /home | tr '\\n' ' '");
    let seen = ran(&out);
    for secret in ["shadow", "sudoers", "ssh", "gshadow"] {
        assert!(
            !seen.split_whitespace().any(|name| name == secret),
            "/etc/{secret} visible: {seen}"
        );
    }
});

both_modes!(read_the_callers_environment_through_init, |w: &World| {
    // airlock's pid 1 is a copy of the supervisor; its environ and memory hold the caller's secrets.
    let script = format!("cat /proc/1/environ /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n' | grep -q canary-env && echo {PWNED}; grep -qa canary-env /proc/1/mem 2>/dev/null && echo {PWNED}");
    let outside = w
        .command("sh")
        .args(["-c", &format!("sh -c '{}'", script.replace('\'', "'\\''"))])
        .env("AIRLOCK_TEST_SECRET", "canary-env")
        .output()
        .unwrap();
    assert!(
        stdout(&outside).contains(PWNED),
        "a child reads its parent's environment on the host: {}",
        stderr(&outside)
    );
    let inside = w
        .airlock_sh(&[], &script)
        .env("AIRLOCK_TEST_SECRET", "canary-env")
        .output()
        .unwrap();
    assert!(
        !ran(&inside).contains(PWNED),
        "the caller's environment leaked through the sandbox's init"
    );
});

both_modes!(
    symlinks_planted_in_a_kept_session_do_not_lead_setup_out,
    |w: &World| {
        // Host workspace: a file and a directory that the profile binds read-only.
        w.write(&w.workspace.join("cfg.txt"), "config");
        let sub = w.workspace.join("cfgdir/sub");
        std::fs::create_dir_all(&sub).unwrap();
        w.give(&w.workspace.join("cfgdir"));
        w.give(&sub);
        let evil_file = w.outside.join("evil-file");
        let evil_dir = w.outside.join("evil-dir");
        // Run 1, kept: replace both with symlinks pointing out of the sandbox, at host paths.
        let out = w.inside_with(
            &["--keep"],
            &format!(
                "rm cfg.txt && ln -s {} cfg.txt && rm -r cfgdir && ln -s {} cfgdir && echo planted",
                evil_file.display(),
                evil_dir.display()
            ),
        );
        assert!(ran(&out).contains("planted"), "{}", stderr(&out));
        let id = stderr(&out)
            .split_whitespace()
            .nth(2)
            .expect("session id")
            .to_string();
        // Run 2 on that session, with a profile binding those paths: setup must not follow them.
        let profile = w.profile(&format!(
            "[filesystem]\nread_only = [\"{ws}/cfg.txt\", \"{ws}/cfgdir/sub\"]\n",
            ws = w.workspace.display()
        ));
        let out = w.inside_with(&["--session", &id, "--profile-file", &profile], "true");
        assert!(
            !evil_file.exists(),
            "setup created a host file through a planted symlink"
        );
        assert!(
            !evil_dir.exists(),
            "setup created a host directory through a planted symlink"
        );
        assert_eq!(
            out.status.code(),
            Some(125),
            "a bind through a planted symlink must be refused: {}",
            stderr(&out)
        );
    }
);

both_modes!(profile_paths_that_open_holes_are_refused, |w: &World| {
    let data = w.outside.join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    w.give(&data);
    w.give(&data.join("sub"));
    let cases = [
        // Read-only inside read-write: the sandbox could write it after all.
        format!(
            "read_only = [\"{d}/sub\"]\nread_write = [\"{d}\"]",
            d = data.display()
        ),
        // Read-write over the workspace: writes would skip the session layer.
        format!("read_write = [\"{}\"]", w.base.display()),
        // airlock's own state.
        format!("read_only = [\"{}\"]", w.state.display()),
        // Nothing to bind: said before anything starts, with the profile's name.
        "read_only = [\"/opt/no-such-dir-xyz\"]".to_string(),
    ];
    for case in cases {
        let profile = w.profile(&format!("[filesystem]\n{case}\n"));
        let out = w.inside_with(&["--profile-file", &profile], "echo ran");
        assert_eq!(out.status.code(), Some(125), "{case}: {}", stderr(&out));
        assert!(!stdout(&out).contains("ran"));
        assert!(
            stderr(&out).contains("[filesystem] path"),
            "{case}: {}",
            stderr(&out)
        );
    }
});

both_modes!(
    a_run_cannot_be_given_write_access_to_its_own_profile,
    |w: &World| {
        // The profile lives in w.base; a read-write bind of its directory would let a run rewrite
        // the policy of the next one.
        let dir = w.base.join("policy");
        std::fs::create_dir_all(&dir).unwrap();
        w.give(&dir);
        let path = dir.join("p.toml");
        w.write(
            &path,
            &format!("[filesystem]\nread_write = [\"{}\"]\n", dir.display()),
        );
        let out = w.inside_with(&["--profile-file", path.to_str().unwrap()], "echo ran");
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(stderr(&out).contains("policy"), "{}", stderr(&out));
    }
);

/// Each mount of `/proc/self/mountinfo`: its mount point and its per-mount options.
fn mounts(mountinfo: &str) -> Vec<(String, Vec<String>)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?.to_string();
            let options = fields.get(5)?.split(',').map(str::to_string).collect();
            Some((point, options))
        })
        .collect()
}

both_modes!(
    no_mount_inside_lets_a_setuid_file_or_device_node_work,
    |w: &World| {
        // A setuid file or a device node made in a writable place must do nothing, and nothing but
        // the named places may be writable: every mount is nosuid, every one but /dev's (whose
        // nodes are single binds) is nodev, and only the workspace, the private tmpfs dirs,
        // /dev/pts, /dev/shm, /proc and the profile's read-write bind are writable.
        let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let host_root = mounts(&host)
            .into_iter()
            .find(|(point, _)| point == "/")
            .unwrap();
        assert!(
            !host_root.1.contains(&"nosuid".to_string()),
            "the host's / is nosuid: this test could not tell"
        );
        let cache = w.base.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        w.give(&cache);
        let secret = w.workspace.join(".env");
        w.write(&secret, "TOKEN=1\n");
        // In a directory of its own: a profile's directory is policy, which no bind may write.
        let policy = w.base.join("policy");
        std::fs::create_dir_all(&policy).unwrap();
        let profile = policy.join("mounts.toml");
        w.write(
            &profile,
            &format!(
                "[filesystem]\nread_only = [\"{}\"]\nread_write = [\"{}\"]\nhide = [\"{}\"]\n",
                w.outside.display(),
                cache.display(),
                secret.display()
            ),
        );
        let profile = profile.to_str().unwrap();
        let out = w.inside_with(&["--profile-file", profile], "cat /proc/self/mountinfo");
        let inside = mounts(&ran(&out));
        assert!(inside.len() > 10, "mountinfo not read: {inside:?}");
        let workspace = w.workspace.to_str().unwrap();
        let cache = cache.to_str().unwrap();
        let device_nodes =
            ["null", "zero", "full", "random", "urandom", "tty"].map(|n| format!("/dev/{n}"));
        let writable = [
            "/dev/pts",
            "/dev/shm",
            "/proc",
            "/tmp",
            "/home/agent",
            workspace,
            cache,
        ];
        assert!(
            inside.iter().any(|(p, _)| p == secret.to_str().unwrap()),
            "the hide is not a mount"
        );
        for (point, options) in &inside {
            if device_nodes.contains(point) {
                continue;
            }
            let has = |flag: &str| options.iter().any(|o| o == flag);
            assert!(has("nosuid"), "{point} is not nosuid: {options:?}");
            if point != "/dev" && point != "/dev/pts" {
                assert!(has("nodev"), "{point} is not nodev: {options:?}");
            }
            if has("rw") {
                assert!(
                    writable.contains(&point.as_str()),
                    "{point} is writable: {options:?}"
                );
            }
        }
        let root = inside.iter().find(|(p, _)| p == "/").unwrap();
        assert!(root.1.contains(&"ro".to_string()), "/ is writable");
    }
);

/// A group the caller belongs to, and a file only that group may read, in a bind.
const SHARED_GID: u32 = 4398;

/// `program` as the identity under test with [`SHARED_GID`] among its supplementary groups (the
/// World's own commands clear them).
fn with_shared_group(w: &World, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut cmd = std::process::Command::new("setpriv");
    if w.mode == Mode::User {
        cmd.arg(format!("--reuid={TEST_UID}"))
            .arg(format!("--regid={TEST_UID}"));
    }
    cmd.arg(format!("--groups={SHARED_GID}"))
        .arg("--")
        .arg(program);
    cmd.env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", &w.home)
        .current_dir(&w.workspace)
        .stdin(std::process::Stdio::null());
    cmd
}

both_modes!(a_group_readable_file_in_a_bind, |w: &World| {
    if skip_unless_root("giving the caller a supplementary group needs root") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let shared = w.outside.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = shared.join("group-only.txt");
    std::fs::write(&secret, "PWNED by a group\n").unwrap();
    // Another user's file, readable by its group alone.
    std::os::unix::fs::chown(&secret, Some(4397), Some(SHARED_GID)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).unwrap();
    let profile = w.profile(&format!(
        "[filesystem]\nread_only = [\"{}\"]\n",
        shared.display()
    ));
    let script = format!("cat {}", secret.display());
    let outside = with_shared_group(w, "sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(stdout(&outside).contains(PWNED), "{}", stderr(&outside));
    let inside = with_shared_group(w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--profile-file", &profile, "--workspace"])
        .arg(&w.workspace)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let check = with_shared_group(w, airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let check: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let groups = check["supplementary_groups"].as_str().unwrap();
    match w.mode {
        // Dropped: the sandbox's uid has no group.
        Mode::Root => {
            assert!(!ran(&inside).contains(PWNED), "{}", stderr(&inside));
            assert!(
                stderr(&inside).contains("Permission denied"),
                "{}",
                stderr(&inside)
            );
            assert!(groups.starts_with("none inside"), "{groups}");
        }
        // The kernel lets no unprivileged process drop them: a limit, which check says (and
        // docs/security.md). Should a kernel ever allow it, this fails: drop them then.
        Mode::User => {
            assert!(ran(&inside).contains(PWNED), "{}", stderr(&inside));
            assert!(
                groups.starts_with("kept") && groups.contains(&SHARED_GID.to_string()),
                "{groups}"
            );
        }
    }
});
