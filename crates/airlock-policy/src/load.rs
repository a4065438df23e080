//! Finding and reading profile files. The only I/O in this crate: reading one file.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::PolicyError;
use crate::parse::parse_profile;
use crate::profile::{Profile, DEFAULT_PROFILE_NAME};

/// System-wide profiles, shared by every user, looked at after the user's own.
const SYSTEM_PROFILE_DIR: &str = "/etc/airlock/profiles";

/// A profile is a few dozen lines; anything much larger is the wrong file (or `/dev/zero`), and
/// reading it whole would only waste memory before failing to parse.
const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// Where named profiles are looked up, in order: `$XDG_CONFIG_HOME/airlock/profiles` (or
/// `$HOME/.config/airlock/profiles` when `XDG_CONFIG_HOME` is unset or empty), then
/// `/etc/airlock/profiles`.
///
/// Takes the two variables' values rather than reading the environment, so it can be tested.
/// A relative `XDG_CONFIG_HOME` is ignored, as the XDG spec requires, so that the directory
/// searched never depends on the current directory (which may be a workspace).
pub fn profile_search_dirs(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Vec<PathBuf> {
    let absolute = |value: Option<&OsStr>| {
        value
            .map(Path::new)
            .filter(|path| path.is_absolute())
            .map(Path::to_path_buf)
    };
    let user_config =
        absolute(xdg_config_home).or_else(|| absolute(home).map(|home| home.join(".config")));
    user_config
        .map(|config| config.join("airlock").join("profiles"))
        .into_iter()
        .chain([PathBuf::from(SYSTEM_PROFILE_DIR)])
        .collect()
}

/// The names a profile can be asked for by: every `NAME.toml` of `search_dirs` with a valid
/// name, the starters, and `default`; sorted, each once. For completion: a directory that
/// cannot be read adds nothing (loading the profile then says why).
pub fn profile_names(search_dirs: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = list_profiles(search_dirs)
        .into_iter()
        .map(|listed| listed.name)
        .collect();
    names.dedup();
    names
}

/// Where a listed profile comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum ListedFrom {
    /// `NAME.toml` in one of the search directories.
    File { path: PathBuf },
    /// A starter shipped with airlock ([`crate::STARTERS`]).
    Starter,
    /// The built-in default (`default`, when no file is called so).
    Builtin,
}

/// One profile `airlock policy list` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub name: String,
    #[serde(flatten)]
    pub from: ListedFrom,
    /// What `-p NAME` loads: false for a profile a file earlier in the search hides.
    pub used: bool,
    /// A starter's first comment line: what it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
}

/// Every profile that can be asked for by name, and those hidden by another of the same name:
/// the files of `search_dirs` in their order, then the starters, then the built-in default;
/// sorted by name, the one `-p NAME` loads first. A directory that cannot be read adds nothing.
pub fn list_profiles(search_dirs: &[PathBuf]) -> Vec<Listed> {
    let mut listed: Vec<Listed> = Vec::new();
    for dir in search_dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut here: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|entry| {
                let file = entry.file_name().into_string().ok()?;
                let stem = file.strip_suffix(".toml")?;
                is_valid_name(stem).then(|| (stem.to_string(), entry.path()))
            })
            .collect();
        here.sort();
        for (name, path) in here {
            listed.push(Listed {
                name,
                from: ListedFrom::File { path },
                used: false,
                about: None,
            });
        }
    }
    listed.extend(crate::starters::STARTERS.iter().map(|starter| Listed {
        name: starter.name.to_string(),
        from: ListedFrom::Starter,
        used: false,
        about: Some(starter.about().to_string()),
    }));
    listed.push(Listed {
        name: DEFAULT_PROFILE_NAME.to_string(),
        from: ListedFrom::Builtin,
        used: false,
        about: Some("no network, no extra paths or variables, the default limits".into()),
    });
    // Stable: within a name, the order of precedence is kept, and the first is the one used.
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let mut previous: Option<String> = None;
    for entry in &mut listed {
        entry.used = previous.as_deref() != Some(entry.name.as_str());
        previous = Some(entry.name.clone());
    }
    listed
}

/// Resolves a profile name: the first of `search_dirs` containing `NAME.toml` wins. When no
/// file is found, `"default"` is the built-in profile, a starter's name the starter
/// ([`crate::STARTERS`]), and any other name is an error.
pub fn load_named(name: &str, search_dirs: &[PathBuf]) -> Result<Profile, PolicyError> {
    if !is_valid_name(name) {
        return Err(PolicyError::InvalidName {
            name: name.to_string(),
        });
    }
    let file_name = format!("{name}.toml");
    for dir in search_dirs {
        let path = dir.join(&file_name);
        match read_profile_text(&path) {
            Ok(text) => return parse_profile(&text, name, &path),
            // Not in this directory: look in the next.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            // Skipping an unreadable profile would silently apply another, possibly looser one.
            Err(error) => return Err(PolicyError::Unreadable { path, error }),
        }
    }
    if name == DEFAULT_PROFILE_NAME {
        return Ok(Profile::builtin_default());
    }
    if let Some(starter) = crate::starters::starter(name) {
        return starter.profile();
    }
    Err(PolicyError::NotFound {
        name: name.to_string(),
        searched: search_dirs.to_vec(),
    })
}

/// Loads an explicitly named file (`--profile-file`); the profile is named after the file stem.
pub fn load_file(path: &Path) -> Result<Profile, PolicyError> {
    let text = read_profile_text(path).map_err(|error| PolicyError::Unreadable {
        path: path.to_path_buf(),
        error,
    })?;
    let name = path
        .file_stem()
        .map_or_else(|| path.to_string_lossy(), |stem| stem.to_string_lossy());
    parse_profile(&text, &name, path)
}

/// Refuses a profile that lies inside the workspace: the sandboxed command can write there, so
/// such a file could be policy written by the very code it is meant to confine.
///
/// Both paths must already be canonical (symlinks resolved); this function does no I/O.
pub fn ensure_outside_workspace(profile_path: &Path, workspace: &Path) -> Result<(), PolicyError> {
    // `Path::starts_with` compares whole components, so `/srv/app2` is not inside `/srv/app`.
    if profile_path.starts_with(workspace) {
        return Err(PolicyError::InsideWorkspace {
            profile: profile_path.to_path_buf(),
            workspace: workspace.to_path_buf(),
        });
    }
    Ok(())
}

/// Letters, digits, `_`, `-`, `.`, not starting with `.`: no `/` means no path traversal, and no
/// leading `.` rules out `..` and hidden files.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn read_profile_text(path: &Path) -> io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // Opened without waiting (a FIFO's open waits for a writer for ever), then taken only if it
    // is a file: a FIFO, a device or a directory is no profile.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, a device, a directory): name the profile's file",
        ));
    }
    let mut text = String::new();
    file.take(MAX_PROFILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "larger than 1 MiB, which is not a profile",
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_fifo_or_a_directory_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p.toml");
        nix_free_mkfifo(&fifo);
        let refused = load_file(&fifo).unwrap_err().to_string();
        assert!(refused.contains("not a regular file"), "{refused}");
        let refused = load_file(dir.path()).unwrap_err().to_string();
        assert!(refused.contains("not a regular file"), "{refused}");
    }

    fn nix_free_mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn dirs(x: Option<&str>, h: Option<&str>) -> Vec<PathBuf> {
        profile_search_dirs(x.map(OsStr::new), h.map(OsStr::new))
    }

    #[test]
    fn search_dirs_prefer_xdg_config_home() {
        assert_eq!(
            dirs(Some("/x/cfg"), Some("/home/u")),
            [
                PathBuf::from("/x/cfg/airlock/profiles"),
                PathBuf::from("/etc/airlock/profiles")
            ]
        );
    }

    #[test]
    fn search_dirs_fall_back_to_home_when_xdg_unset_empty_or_relative() {
        let expected = [
            PathBuf::from("/home/u/.config/airlock/profiles"),
            PathBuf::from("/etc/airlock/profiles"),
        ];
        assert_eq!(dirs(None, Some("/home/u")), expected);
        assert_eq!(dirs(Some(""), Some("/home/u")), expected);
        assert_eq!(dirs(Some("rel/cfg"), Some("/home/u")), expected);
    }

    #[test]
    fn search_dirs_without_any_home_is_only_etc() {
        assert_eq!(dirs(None, None), [PathBuf::from("/etc/airlock/profiles")]);
        assert_eq!(
            dirs(Some(""), Some("")),
            [PathBuf::from("/etc/airlock/profiles")]
        );
    }

    struct Dirs {
        _tmp: tempfile::TempDir,
        first: PathBuf,
        second: PathBuf,
    }

    fn two_dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let first = tmp.path().join("first");
        let second = tmp.path().join("second");
        fs::create_dir(&first).unwrap();
        fs::create_dir(&second).unwrap();
        Dirs {
            _tmp: tmp,
            first,
            second,
        }
    }

    #[test]
    fn load_named_takes_the_first_dir_that_has_the_file() {
        let d = two_dirs();
        fs::write(d.first.join("ci.toml"), "[limits]\nprocesses = 10\n").unwrap();
        fs::write(d.second.join("ci.toml"), "[limits]\nprocesses = 20\n").unwrap();
        let p = load_named("ci", &[d.first.clone(), d.second.clone()]).unwrap();
        assert_eq!(p.name, "ci");
        assert_eq!(p.limits.processes, 10);
        assert_eq!(p.source, Some(d.first.join("ci.toml")));
    }

    #[test]
    fn load_named_falls_back_to_the_second_dir() {
        let d = two_dirs();
        fs::write(d.second.join("ci.toml"), "[limits]\nprocesses = 20\n").unwrap();
        let p = load_named("ci", &[d.first.clone(), d.second.clone()]).unwrap();
        assert_eq!(p.limits.processes, 20);
        assert_eq!(p.source, Some(d.second.join("ci.toml")));
    }

    #[test]
    fn default_is_builtin_when_no_file_exists() {
        let d = two_dirs();
        let p = load_named("default", &[d.first.clone(), d.second.clone()]).unwrap();
        assert_eq!(p, Profile::builtin_default());
    }

    #[test]
    fn a_starter_is_what_its_name_means_until_a_file_says_otherwise() {
        let d = two_dirs();
        let dirs = [d.first.clone(), d.second.clone()];
        let starter = load_named("pip", &dirs).unwrap();
        assert_eq!(starter, crate::starter("pip").unwrap().profile().unwrap());
        assert_eq!(starter.source, None);
        fs::write(d.second.join("pip.toml"), "network = \"none\"\n").unwrap();
        let file = load_named("pip", &dirs).unwrap();
        assert_eq!(file.network, crate::NetworkMode::None);
        assert_eq!(file.source, Some(d.second.join("pip.toml")));
        // A broken file of that name is an error, never a reason to fall back to the starter.
        fs::write(d.first.join("pip.toml"), "[network\n").unwrap();
        assert!(matches!(
            load_named("pip", &dirs),
            Err(PolicyError::Invalid { .. })
        ));
    }

    #[test]
    fn the_list_says_where_each_profile_comes_from_and_which_is_used() {
        let d = two_dirs();
        fs::write(d.first.join("npm.toml"), "").unwrap();
        fs::write(d.second.join("npm.toml"), "").unwrap();
        fs::write(d.second.join("ci.toml"), "").unwrap();
        fs::write(d.second.join(".hidden.toml"), "").unwrap();
        let listed = list_profiles(&[d.first.clone(), d.second.clone()]);
        let shown: Vec<(&str, &ListedFrom, bool)> = listed
            .iter()
            .filter(|l| ["ci", "npm", "pip", "default"].contains(&l.name.as_str()))
            .map(|l| (l.name.as_str(), &l.from, l.used))
            .collect();
        let file = |path: PathBuf| ListedFrom::File { path };
        assert_eq!(
            shown,
            [
                ("ci", &file(d.second.join("ci.toml")), true),
                ("default", &ListedFrom::Builtin, true),
                ("npm", &file(d.first.join("npm.toml")), true),
                ("npm", &file(d.second.join("npm.toml")), false),
                ("npm", &ListedFrom::Starter, false),
                ("pip", &ListedFrom::Starter, true),
            ]
        );
        assert!(listed.iter().all(|l| l.name != ".hidden"));
        assert_eq!(
            profile_names(&[d.first.clone(), d.second.clone()]),
            ["apt", "cargo", "ci", "default", "github", "go", "npm", "pip"]
        );
    }

    #[test]
    fn a_default_file_overrides_the_builtin() {
        let d = two_dirs();
        fs::write(
            d.second.join("default.toml"),
            "[limits]\nopen_files = 100\n",
        )
        .unwrap();
        let p = load_named("default", &[d.first.clone(), d.second.clone()]).unwrap();
        assert_eq!(p.name, "default");
        assert_eq!(p.limits.open_files, 100);
        assert_eq!(p.source, Some(d.second.join("default.toml")));
    }

    #[test]
    fn missing_named_profile_lists_the_dirs() {
        let d = two_dirs();
        let err = load_named("ci", &[d.first.clone(), d.second.clone()]).unwrap_err();
        match &err {
            PolicyError::NotFound { name, searched } => {
                assert_eq!(name, "ci");
                assert_eq!(searched, &[d.first.clone(), d.second.clone()]);
            }
            other => panic!("unexpected {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&d.first.display().to_string()), "{msg}");
        assert!(msg.contains("--profile-file"), "{msg}");
    }

    #[test]
    fn unreadable_profile_is_an_error_not_a_fallback() {
        let d = two_dirs();
        // A directory where the file should be: open succeeds, reading fails on every system,
        // root included.
        fs::create_dir(d.first.join("ci.toml")).unwrap();
        fs::write(d.second.join("ci.toml"), "").unwrap();
        let err = load_named("ci", &[d.first.clone(), d.second.clone()]).unwrap_err();
        match err {
            PolicyError::Unreadable { path, .. } => assert_eq!(path, d.first.join("ci.toml")),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn invalid_names_are_refused_before_any_lookup() {
        let d = two_dirs();
        fs::write(d.first.join("x.toml"), "").unwrap();
        let inner = d.first.join("sub");
        for name in [
            "../x",
            "..",
            ".",
            ".hidden",
            "",
            "a/b",
            "/etc/passwd",
            "sp ace",
            "é",
        ] {
            match load_named(name, std::slice::from_ref(&inner)) {
                Err(PolicyError::InvalidName { name: n }) => assert_eq!(n, name),
                other => panic!("{name:?}: unexpected {other:?}"),
            }
        }
        for name in ["ci", "ci-bot_2", "v1.2", "A"] {
            assert!(is_valid_name(name), "{name}");
        }
    }

    #[test]
    fn load_file_names_the_profile_after_the_stem() {
        let d = two_dirs();
        let path = d.first.join("nightly.build.toml");
        fs::write(&path, "network = \"none\"\n").unwrap();
        let p = load_file(&path).unwrap();
        assert_eq!(p.name, "nightly.build");
        assert_eq!(p.source, Some(path));
    }

    #[test]
    fn load_file_reports_missing_file() {
        let d = two_dirs();
        let path = d.first.join("nope.toml");
        let err = load_file(&path).unwrap_err();
        assert!(matches!(err, PolicyError::Unreadable { .. }));
        assert!(err
            .to_string()
            .starts_with(&format!("cannot read profile {}: ", path.display())));
    }

    #[test]
    fn load_file_refuses_huge_files() {
        let d = two_dirs();
        let path = d.first.join("big.toml");
        fs::write(&path, "#".repeat(MAX_PROFILE_BYTES as usize + 1)).unwrap();
        assert!(matches!(
            load_file(&path),
            Err(PolicyError::Unreadable { .. })
        ));
        fs::write(&path, "#".repeat(MAX_PROFILE_BYTES as usize)).unwrap();
        assert!(load_file(&path).is_ok());
    }

    #[test]
    fn parse_errors_name_the_file_found() {
        let d = two_dirs();
        fs::write(d.first.join("ci.toml"), "[limits]\nmemroy = 1\n").unwrap();
        let err = load_named("ci", std::slice::from_ref(&d.first)).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{}:2:1: unknown key `memroy`",
                d.first.join("ci.toml").display()
            )),
            "{err}"
        );
    }

    #[test]
    fn workspace_containment() {
        let ws = Path::new("/srv/app");
        assert!(ensure_outside_workspace(Path::new("/etc/airlock/profiles/ci.toml"), ws).is_ok());
        assert!(ensure_outside_workspace(Path::new("/srv/app2/ci.toml"), ws).is_ok());
        assert!(ensure_outside_workspace(Path::new("/srv/ci.toml"), ws).is_ok());
        for inside in ["/srv/app/ci.toml", "/srv/app/.airlock/p.toml", "/srv/app"] {
            let err = ensure_outside_workspace(Path::new(inside), ws).unwrap_err();
            assert!(matches!(err, PolicyError::InsideWorkspace { .. }));
            let msg = err.to_string();
            assert!(
                msg.contains("because the sandboxed command can write there"),
                "{msg}"
            );
            assert!(msg.contains("~/.config/airlock/profiles/"), "{msg}");
        }
        // A workspace at `/` contains everything.
        assert!(ensure_outside_workspace(
            Path::new("/etc/airlock/profiles/ci.toml"),
            Path::new("/")
        )
        .is_err());
    }
}
