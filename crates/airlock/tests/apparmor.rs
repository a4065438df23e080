//! On Ubuntu 23.10+ (AppArmor restricting unprivileged user namespaces) without airlock's
//! profile, `check` and `run` say what is wrong and what to do, in the same words. These machines
//! have no AppArmor: the debug build reads a recorded Ubuntu 24.04 tree instead of "/".
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use support::*;

const SYSCTL: &str = "sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0";

/// The profile's commands for the binary under test, which is not where the shipped profile
/// expects it: its path put in the profile.
fn install() -> String {
    format!(
        "sed 's#/usr/{{local/,}}bin/airlock#{}#' packaging/apparmor/airlock | sudo tee \
         /etc/apparmor.d/airlock >/dev/null && sudo apparmor_parser -r /etc/apparmor.d/airlock",
        airlock_bin_with_test_hooks().display()
    )
}

/// What an unprivileged, unconfined process sees on a fresh Ubuntu 24.04.
fn restricted_ubuntu(w: &World) -> PathBuf {
    let root = w.base.join("ubuntu-24.04");
    for (path, contents) in [
        (
            "proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1\n",
        ),
        ("sys/module/apparmor/parameters/enabled", "Y\n"),
        (
            "sys/kernel/security/apparmor/features/domain/version",
            "1.2\n",
        ),
        ("proc/self/attr/apparmor/current", "unconfined\n"),
        (
            "proc/self/status",
            "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
        ),
        ("proc/self/uid_map", "         0          0 4294967295\n"),
    ] {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    root
}

both_modes!(check_on_a_restricted_ubuntu_says_what_to_do, |w: &World| {
    let ubuntu = restricted_ubuntu(w);
    let out = w
        .airlock_with_test_hooks()
        .arg("check")
        .env("AIRLOCK_TEST_APPARMOR_ROOT", &ubuntu)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("MISSING  user namespace"), "{text}");
    assert!(
        text.contains("AppArmor restricts unprivileged user namespaces"),
        "{text}"
    );
    assert!(text.contains(&install()) && text.contains(SYSCTL), "{text}");
    assert!(text.contains("protection: none"), "{text}");

    let out = w
        .airlock_with_test_hooks()
        .args(["check", "--json"])
        .env("AIRLOCK_TEST_APPARMOR_ROOT", &ubuntu)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let layer = &report["layers"][0];
    assert_eq!(layer["name"], "user namespace");
    assert_eq!(layer["available"], false);
    let fix = layer["fix"].as_str().unwrap();
    assert!(fix.contains(&install()) && fix.contains(SYSCTL), "{fix}");
    assert_eq!(report["protection"], "none");
});

both_modes!(
    run_on_a_restricted_ubuntu_refuses_with_the_same_words,
    |w: &World| {
        let ubuntu = restricted_ubuntu(w);
        let out = w
            .airlock_with_test_hooks()
            .args(["run", "--", "sh", "-c", "echo it-ran"])
            .env("AIRLOCK_TEST_APPARMOR_ROOT", &ubuntu)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(!stdout(&out).contains("it-ran"));
        assert!(
            err.contains("AppArmor restricts unprivileged user namespaces"),
            "{err}"
        );
        assert!(err.contains(&install()) && err.contains(SYSCTL), "{err}");
        assert!(!err.contains("Operation not permitted"), "{err}");
    }
);

#[test]
fn check_without_apparmor_does_not_mention_it() {
    let Some(w) = World::new(if is_root() { Mode::Root } else { Mode::User }) else {
        return;
    };
    let out = w.airlock().args(["check", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let layer = &report["layers"][0];
    assert_eq!(layer["name"], "user namespace");
    assert!(layer.get("fix").is_none(), "{layer}");
    assert!(
        !layer["detail"].as_str().unwrap().contains("AppArmor"),
        "{layer}"
    );
}
