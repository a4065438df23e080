//! Names that look like a name git or a tool treats specially without being it: `.gіt` with a
//! Cyrillic `і` beside `.git`, `CLAUDE.md` with a Greek `Α`. A person reading the diff takes the
//! one for the other (and a reviewer's eye, or a tool's check by name, lets the spoof through);
//! compared by the confusable skeleton of Unicode's UTS #39.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::sync::OnceLock;

use unicode_security::confusable_detection::skeleton;

use super::{agents, dotpath, folded, tools};

/// Names git and the tools treat specially besides those of the hazard tables.
const SPECIAL: &[&str] = &[
    ".git",
    ".gitmodules",
    ".gitattributes",
    ".github",
    ".gitlab",
    "hooks",
    "workflows",
    "actions",
    "config",
    "HEAD",
    "objects",
    "commondir",
    "gitdir",
    ".airlock",
    "airlock",
    "profiles",
    "Makefile",
    "makefile",
    "GNUmakefile",
    "justfile",
    "Dockerfile",
    "package.json",
    "node_modules",
    ".bin",
    ".venv",
    "venv",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "sitecustomize.py",
    "usercustomize.py",
    "conftest.py",
    "setup.py",
    "build.rs",
    "Cargo.toml",
    "pyproject.toml",
];

/// A name (folded as the hazard tables fold it) as it is compared: its confusable skeleton, in
/// lower case (the skeleton of a lower-case letter may be a capital: `0` is `O`).
pub(super) fn key(name: &str) -> String {
    skeleton(name).collect::<String>().to_lowercase()
}

/// Every special name in lower case, and their keys.
struct Specials {
    names: HashSet<String>,
    keys: HashSet<String>,
}

fn specials() -> &'static Specials {
    static SPECIALS: OnceLock<Specials> = OnceLock::new();
    SPECIALS.get_or_init(|| {
        let tables = [
            agents::SHELL_STARTUP,
            agents::AGENT_FILES,
            agents::AGENT_DIRS,
            agents::GITHUB_AGENT_DIRS,
            agents::GITLAB_AGENT_DIRS,
            agents::CI_DIRS,
            agents::CI_FILES,
            tools::FILES,
            tools::DIRS,
            dotpath::KNOWN_INERT,
        ];
        let pairs = tools::PAIRS.iter().flat_map(|(dir, file, _)| [*dir, *file]);
        let names: HashSet<String> = tables
            .iter()
            .flat_map(|table| agents::names(table))
            .chain(pairs)
            .chain(SPECIAL.iter().copied())
            .map(str::to_lowercase)
            .collect();
        let keys = names.iter().map(|name| key(name)).collect();
        Specials { names, keys }
    })
}

/// Does `name` spoof a special name: not ASCII (a plain ASCII name is what it shows), and the
/// same as one by its skeleton? A name that folds to the special name itself (another case) is
/// that name, with that name's own hazard, not a spoof.
pub(super) fn spoofs_a_special_name(name: &OsStr) -> bool {
    let Some(text) = name.to_str() else {
        return false;
    };
    if text.is_ascii() {
        return false;
    }
    let Some(folded) = folded(name) else {
        return false;
    };
    let specials = specials();
    !specials.names.contains(&folded) && specials.keys.contains(&key(&folded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spoofs_of_special_names() {
        let spoof = |s: &str| spoofs_a_special_name(OsStr::new(s));
        assert!(spoof(".g\u{456}t"), "Cyrillic i");
        assert!(spoof(".G\u{406}T"), "Cyrillic capital I");
        assert!(spoof("CLAUDE.m\u{501}"), "Cyrillic komi de");
        assert!(spoof("\u{391}GENTS.md"), "Greek capital alpha");
        assert!(spoof(".\u{435}nvrc"), "Cyrillic ie");
        assert!(spoof("Mak\u{435}file"));
        assert!(spoof(".vsc\u{43e}de"));
        assert!(spoof("h\u{43e}\u{43e}ks"));
        // Plain ASCII shows what it is; other names are not special.
        assert!(!spoof(".git"));
        assert!(!spoof(".c1aude"));
        assert!(!spoof("caf\u{e9}.txt"));
        assert!(!spoof("\u{43c}\u{430}\u{439}\u{43d}.rs"));
        assert!(!spoof("README.md"));
    }
}
