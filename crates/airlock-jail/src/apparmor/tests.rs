//! Recorded trees of the machines airlock meets: each file as the kernel shows it there.

use super::*;

const INSTALLED: &str = "/usr/local/bin/airlock";
const CARGO_INSTALLED: &str = "/home/dev/.cargo/bin/airlock";
/// An unprivileged user's /proc/self/status (the lines that matter).
const USER_STATUS: &str =
    "Name:\tairlock\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n";
const ROOT_STATUS: &str = "Name:\tairlock\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n";
const INITIAL_UID_MAP: &str = "         0          0 4294967295\n";
/// Part of `profiles` on a fresh Ubuntu 24.04.
const UBUNTU_PROFILES: &str = "unprivileged_userns (enforce)\n/usr/bin/man (enforce)\n\
    lsb_release (enforce)\nbusybox (unconfined)\nchrome (unconfined)\n";

/// Write `files` (path under the root, contents) into a fresh root.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (path, contents) in files {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    root
}

/// Ubuntu 24.04 as an unprivileged user, with `label` and (when root could read it) `profiles`.
fn ubuntu(label: &str, profiles: Option<&str>) -> tempfile::TempDir {
    let mut files = vec![
        (
            "proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1\n",
        ),
        ("sys/module/apparmor/parameters/enabled", "Y\n"),
        (
            "sys/kernel/security/apparmor/features/domain/version",
            "1.2\n",
        ),
        ("proc/self/attr/apparmor/current", label),
        ("proc/self/attr/current", label),
        ("proc/self/status", USER_STATUS),
        ("proc/self/uid_map", INITIAL_UID_MAP),
    ];
    if let Some(profiles) = profiles {
        files.push(("sys/kernel/security/apparmor/profiles", profiles));
    }
    tree(&files)
}

#[test]
fn ubuntu_24_04_restricts_an_unconfined_airlock_and_says_how_to_fix_it() {
    let root = ubuntu("unconfined\n", Some(UBUNTU_PROFILES));
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::Blocked {
            binary: INSTALLED.into(),
            profile_loaded: Some(false)
        }
    );
    assert!(found.blocks());
    let summary = found.summary().unwrap();
    assert!(
        summary.contains("kernel.apparmor_restrict_unprivileged_userns=1"),
        "{summary}"
    );
    assert!(summary.contains("profile is not loaded"), "{summary}");
    let fix = found.fix().unwrap();
    assert!(
        fix.contains(
            "sudo install -m 644 packaging/apparmor/airlock /etc/apparmor.d/airlock && \
             sudo apparmor_parser -r /etc/apparmor.d/airlock"
        ),
        "{fix}"
    );
    assert!(
        fix.contains("sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0"),
        "{fix}"
    );
    let refusal = found.refusal().unwrap();
    assert!(
        refusal.contains(&summary) && refusal.contains(&fix),
        "{refusal}"
    );
}

#[test]
fn an_unprivileged_user_cannot_see_the_profiles_and_is_told_so() {
    let root = ubuntu("unconfined\n", None);
    let found = detect(root.path(), Path::new("/usr/bin/airlock"));
    assert_eq!(
        found,
        UsernsRestriction::Blocked {
            binary: "/usr/bin/airlock".into(),
            profile_loaded: None
        }
    );
    assert!(found.summary().unwrap().contains("only root can see"));
    assert!(found.fix().unwrap().contains("sudo install -m 644"));
}

#[test]
fn airlock_confined_by_its_own_profile_may_use_user_namespaces() {
    let profiles = format!("{UBUNTU_PROFILES}airlock (unconfined)\n");
    let root = ubuntu("airlock (unconfined)\n", Some(&profiles));
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::AllowedByProfile {
            label: "airlock (unconfined)".into()
        }
    );
    assert!(!found.blocks());
    assert!(found.fix().is_none() && found.refusal().is_none());
    assert!(found
        .summary()
        .unwrap()
        .contains("airlock's profile confines it"));
}

#[test]
fn a_profile_loaded_for_another_path_says_which_path_it_must_name() {
    let profiles = format!("{UBUNTU_PROFILES}airlock (unconfined)\n");
    let root = ubuntu("unconfined\n", Some(&profiles));
    let found = detect(root.path(), Path::new(CARGO_INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::Blocked {
            binary: CARGO_INSTALLED.into(),
            profile_loaded: Some(true)
        }
    );
    let summary = found.summary().unwrap();
    assert!(
        summary.contains("loaded but does not apply")
            && summary.contains("/usr/{local/,}bin/airlock")
            && summary.contains(CARGO_INSTALLED),
        "{summary}"
    );
    let fix = found.fix().unwrap();
    assert!(
        fix.contains(
            "sed 's#/usr/{local/,}bin/airlock#/home/dev/.cargo/bin/airlock#' \
             packaging/apparmor/airlock | sudo tee /etc/apparmor.d/airlock >/dev/null && \
             sudo apparmor_parser -r /etc/apparmor.d/airlock"
        ),
        "{fix}"
    );
}

#[test]
fn a_path_sed_cannot_carry_is_described_instead() {
    let root = ubuntu("unconfined\n", None);
    let fix = detect(root.path(), Path::new("/home/dev/my tools/airlock"))
        .fix()
        .unwrap();
    assert!(
        fix.contains("replaced by \"/home/dev/my tools/airlock\""),
        "{fix}"
    );
    assert!(!fix.contains("sed "), "{fix}");
}

#[test]
fn debian_without_apparmor_is_not_restricted() {
    let root = tree(&[
        ("proc/self/status", USER_STATUS),
        ("proc/self/uid_map", INITIAL_UID_MAP),
        ("proc/self/attr/current", ""),
    ]);
    let found = detect(root.path(), Path::new(INSTALLED));
    assert!(
        matches!(found, UsernsRestriction::NotRestricted { .. }),
        "{found:?}"
    );
    assert!(found.summary().is_none() && found.fix().is_none() && !found.blocks());
}

#[test]
fn apparmor_disabled_at_boot_is_not_restricted_whatever_the_sysctl_says() {
    let root = tree(&[
        (
            "proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1\n",
        ),
        ("sys/module/apparmor/parameters/enabled", "N\n"),
        ("proc/self/attr/current", "unconfined\n"),
    ]);
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::NotRestricted {
            why: "AppArmor is not enabled"
        }
    );
}

#[test]
fn apparmor_without_the_restriction_is_not_restricted() {
    // Debian 12: AppArmor on, a kernel without the sysctl.
    let root = tree(&[
        ("sys/module/apparmor/parameters/enabled", "Y\n"),
        (
            "sys/kernel/security/apparmor/profiles",
            "man_filter (enforce)\n",
        ),
        ("proc/self/attr/current", "unconfined\n"),
    ]);
    let found = detect(root.path(), Path::new(INSTALLED));
    assert!(
        matches!(found, UsernsRestriction::NotRestricted { .. }),
        "{found:?}"
    );
}

#[test]
fn the_sysctl_at_zero_lifts_the_restriction() {
    let root = ubuntu("unconfined\n", Some(UBUNTU_PROFILES));
    std::fs::write(
        root.path()
            .join("proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        "0\n",
    )
    .unwrap();
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::NotRestricted {
            why: "kernel.apparmor_restrict_unprivileged_userns=0"
        }
    );
    assert!(found.refusal().is_none());
}

#[test]
fn root_in_the_initial_namespace_is_not_restricted() {
    let root = ubuntu("unconfined\n", Some(UBUNTU_PROFILES));
    std::fs::write(root.path().join("proc/self/status"), ROOT_STATUS).unwrap();
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(found, UsernsRestriction::Privileged);
    assert!(!found.blocks());
    assert!(found.summary().unwrap().contains("CAP_SYS_ADMIN"));
}

#[test]
fn root_of_a_container_user_namespace_is_restricted_like_anyone() {
    let root = ubuntu("unconfined\n", None);
    std::fs::write(root.path().join("proc/self/status"), ROOT_STATUS).unwrap();
    std::fs::write(root.path().join("proc/self/uid_map"), "0 100000 65536\n").unwrap();
    assert!(detect(root.path(), Path::new(INSTALLED)).blocks());
}

#[test]
fn the_label_falls_back_to_attr_current_on_kernels_without_attr_apparmor() {
    let root = ubuntu("unconfined\n", None);
    std::fs::remove_file(root.path().join("proc/self/attr/apparmor/current")).unwrap();
    std::fs::write(
        root.path().join("proc/self/attr/current"),
        "airlock (enforce)\0",
    )
    .unwrap();
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::AllowedByProfile {
            label: "airlock (enforce)".into()
        }
    );
}

#[test]
fn another_profile_is_not_refused_but_named() {
    let root = ubuntu("snap.code.code (unconfined)\n", None);
    let found = detect(root.path(), Path::new(INSTALLED));
    assert_eq!(
        found,
        UsernsRestriction::OtherProfile {
            label: "snap.code.code (unconfined)".into()
        }
    );
    assert!(!found.blocks());
    assert!(found
        .summary()
        .unwrap()
        .contains("snap.code.code (unconfined)"));
}

/// Where an `apparmor_parser` knows ABI 4.0 (AppArmor 4: Ubuntu 24.04, Debian 13), the shipped
/// profile parses, and a profile with a rule the parser does not know does not (so that a parser
/// that accepts anything cannot pass this). `AIRLOCK_TEST_APPARMOR_PARSER` names the parser and
/// `AIRLOCK_TEST_APPARMOR_BASE` its /etc/apparmor.d (the abi and tunables). Debian 12's parser
/// (3.0) knows neither the ABI nor the `userns` rule: skipped there, saying so.
#[test]
fn the_shipped_profile_parses_where_the_parser_knows_abi_4() {
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/apparmor/airlock");
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.contains(&format!("profile {PROFILE_NAME} {PROFILE_ATTACHMENT} ")));
    assert!(text.contains("abi <abi/4.0>,") && text.contains("  userns,"));
    let parser = std::env::var_os("AIRLOCK_TEST_APPARMOR_PARSER")
        .unwrap_or_else(|| "apparmor_parser".into());
    let base = std::env::var_os("AIRLOCK_TEST_APPARMOR_BASE")
        .map_or_else(|| PathBuf::from("/etc/apparmor.d"), PathBuf::from);
    if !base.join("abi/4.0").exists() {
        // scripts/test.sh provides one as root (scripts/lib/apparmor4.sh); CI must not skip.
        let ci = std::env::var_os("CI").is_some_and(|v| v == "true")
            || std::env::var_os("AIRLOCK_TEST_REQUIRE_ROOT").is_some_and(|v| v == "1");
        assert!(
            !ci,
            "no apparmor_parser that knows ABI 4.0 (set AIRLOCK_TEST_APPARMOR_PARSER and _BASE, see scripts/lib/apparmor4.sh)"
        );
        eprintln!("skipped parsing: no apparmor_parser here knows ABI 4.0");
        return;
    }
    let parse = |profile: &Path| {
        std::process::Command::new(&parser)
            .arg("--base")
            .arg(&base)
            .args(["--skip-kernel-load", "--skip-cache", "--quiet"])
            .arg(profile)
            .output()
            .unwrap()
    };
    let parsed = parse(&profile);
    let stderr = String::from_utf8_lossy(&parsed.stderr);
    assert!(parsed.status.success(), "{stderr}");
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        bad.path(),
        text.replace("  userns,", "  userns,\n  frobnicate,"),
    )
    .unwrap();
    assert!(!parse(bad.path()).status.success());
}
