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

/// The keys a name is compared by: its confusable skeleton in lower case, taken three ways,
/// since the skeleton of a letter and of its other case may differ. Of the name as written,
/// then again of that in lower case: a capital that looks Latin may have a small letter that
/// does not (Cyrillic `М` is `M`, its `м` is nothing), so `Мakefile` needs this one. Of the
/// name in lower case: a small letter may look like a Latin one whose capital it does not look
/// like (Cyrillic `І` is taken for `l`, its `і` for `i`), so `.GІT` needs that one. And of the
/// name with each letter that is not ASCII replaced by its skeleton, in lower case: `МAIN.rs`
/// beside `main.rs` (the skeleton of `I` is `l`, of `i` is `i`). Two names look alike when a
/// key of one is a key of the other.
pub(super) fn keys(name: &str) -> [String; 3] {
    let lower_skeleton = |text: &str| skeleton(text).collect::<String>().to_lowercase();
    let each_letter: String = name
        .chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                skeleton(&c.to_string()).collect()
            }
        })
        .collect();
    [
        lower_skeleton(&lower_skeleton(name)),
        lower_skeleton(&name.to_lowercase()),
        lower_skeleton(&each_letter.to_lowercase()),
    ]
}

/// The keys of a name as written (the code points HFS+ ignores left out), or None when it is
/// not UTF-8.
pub(super) fn keys_of(name: &OsStr) -> Option<[String; 3]> {
    let text: String = name
        .to_str()?
        .chars()
        .filter(|c| !super::is_hfs_ignorable(*c))
        .collect();
    Some(keys(&text))
}

/// `text` without its combining marks (decomposed first): `.gi̇t` (i and a dot above) is
/// `.git` to the eye in most fonts. Compared with the special names alone, which are ASCII, so
/// that `café` and `cafe` are never taken for each other.
fn without_marks(text: &str) -> String {
    use unicode_normalization::char::is_combining_mark;
    use unicode_normalization::UnicodeNormalization as _;
    text.nfd().filter(|c| !is_combining_mark(*c)).collect()
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
        // Of each name as the tables write it and in lower case.
        let written = tables
            .iter()
            .flat_map(|table| agents::names(table))
            .chain(SPECIAL.iter().copied())
            .map(str::to_string);
        let keys = names
            .iter()
            .cloned()
            .chain(written)
            .flat_map(|name| keys(&name))
            .collect();
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
    if specials.names.contains(&folded) {
        return false;
    }
    // As written (NTFS's `:STREAM` and trailing dots dropped, as `folded` does), and without
    // combining marks.
    let visible = text.split(':').next().unwrap_or(text);
    let visible: String = visible
        .chars()
        .filter(|c| !super::is_hfs_ignorable(*c))
        .collect();
    let visible = visible.trim_end_matches(['.', ' ']);
    keys(visible)
        .into_iter()
        .chain(keys(&without_marks(visible)))
        .any(|k| specials.keys.contains(&k))
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
        // Capitals whose small letters look like nothing Latin (the reviewer's).
        assert!(spoof("\u{41c}akefile"), "Cyrillic capital em");
        assert!(spoof("\u{397}EAD"), "Greek capital eta");
        assert!(spoof("GE\u{41c}INI.md"));
        assert!(spoof(".\u{39d}PMRC"), "Greek capital nu");
        // Combining marks over an ASCII special name.
        assert!(spoof(".gi\u{307}t"), "i with a dot above");
        assert!(spoof(".g\u{ed}t"), "i acute, precomposed");
        // Plain ASCII shows what it is; other names are not special.
        assert!(!spoof(".git"));
        assert!(!spoof(".c1aude"));
        assert!(!spoof("caf\u{e9}.txt"));
        assert!(!spoof("\u{43c}\u{430}\u{439}\u{43d}.rs"));
        assert!(!spoof("README.md"));
    }
}
