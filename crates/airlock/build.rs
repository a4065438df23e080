//! Records, for `airlock --version`, the git commit airlock is built from (AIRLOCK_GIT_COMMIT:
//! "unknown" without one: a source tarball, no git installed; set in the environment of the
//! build, it wins: a packager building from an exported tree) and the target it is built for.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=AIRLOCK_GIT_COMMIT");
    let commit = match std::env::var("AIRLOCK_GIT_COMMIT") {
        Ok(given) => given,
        Err(_) => commit_from_git().unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=AIRLOCK_GIT_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown target".to_owned());
    println!("cargo:rustc-env=AIRLOCK_TARGET={target}");
}

/// The short hash of HEAD, and the files whose change means a new HEAD (rebuild then).
fn commit_from_git() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    // A path that does not exist would make cargo run this script on every build.
    for path in watched.iter().filter(|path| Path::new(path).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    Some(commit)
}

/// git's answer, from the crate's directory; None without git, outside a repository, on failure.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}
