//! `[apply]`: what `airlock apply` must ask about besides its built-in tables.
//!
//! ```toml
//! [apply]
//! tool_config = [
//!   { path = ".toolrc", reason = "tool: runs the hooks it names on every build" },
//!   { path = "deploy/*.yml", reason = "deploy: commands run on the production hosts" },
//! ]
//! ```

use std::path::{Component, Path};

use toml::de::DeValue;

use crate::doc::{Doc, Key, Section, Value};
use crate::error::PolicyError;
use crate::profile::{ApplyPolicy, ToolConfigEntry};

pub(super) const APPLY: Section = Section {
    name: Some("apply"),
    keys: &["tool_config"],
};
const ENTRY: Section = Section {
    name: Some("apply.tool_config"),
    keys: &["path", "reason"],
};
const EXAMPLE: &str =
    "e.g. tool_config = [{ path = \".toolrc\", reason = \"tool: runs the hooks it names\" }]";
/// One line a person reads beside the path.
const MAX_REASON_CHARS: usize = 200;

pub(super) fn apply(
    doc: &Doc,
    key: &Key,
    value: &Value,
    apply: &mut ApplyPolicy,
) -> Result<(), PolicyError> {
    for (key, value) in doc.entries(doc.table(key, value)?, &APPLY) {
        match key.name {
            "tool_config" => {
                let item_key = key.item();
                for item in doc.array(&key, value, EXAMPLE)? {
                    apply.tool_config.push(entry(doc, &item_key, item)?);
                }
            }
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    Ok(())
}

fn entry(doc: &Doc, key: &Key, item: &Value) -> Result<ToolConfigEntry, PolicyError> {
    let DeValue::Table(table) = item.get_ref() else {
        return Err(doc.wrong_type_of(&key.describe(), item, "a table", EXAMPLE));
    };
    let (mut path, mut reason) = (None, None);
    for (field, value) in doc.entries(table, &ENTRY) {
        match field.name {
            "path" => path = Some(pattern(doc, &field, value)?),
            "reason" => reason = Some(reason_of(doc, &field, value)?),
            _ => return Err(doc.unknown_key(&field)),
        }
    }
    match (path, reason) {
        (Some(path), Some(reason)) => Ok(ToolConfigEntry { path, reason }),
        (None, _) => Err(doc.error(
            item.span(),
            format!("{} has no `path`", key.describe()),
            EXAMPLE,
        )),
        (_, None) => Err(doc.error(
            item.span(),
            format!("{} has no `reason`", key.describe()),
            "say in one line what the tool does with the file, e.g. reason = \"tool: runs the hooks it names\"",
        )),
    }
}

/// A glob over workspace paths: without `/` a name at any depth, with one a path from the
/// workspace's root. Compiled as airlock-changes compiles it (`hazard::compile_tool_pattern`):
/// `*` within a name, `**` across directories, any case.
fn pattern(doc: &Doc, key: &Key, value: &Value) -> Result<String, PolicyError> {
    let text = doc.string(
        key,
        value,
        "e.g. path = \".toolrc\" or path = \"deploy/*.yml\"",
    )?;
    let bare = text.trim_start_matches('/').trim_end_matches('/');
    let problem = |what: String, hint: &str| {
        doc.error(value.span(), format!("{}: {what}", key.describe()), hint)
    };
    if bare.is_empty() {
        return Err(problem(
            "names no path".into(),
            "write a file name or a path in the workspace, e.g. \".toolrc\"",
        ));
    }
    if text.contains('\0')
        || Path::new(bare)
            .components()
            .any(|c| c == Component::ParentDir)
    {
        return Err(problem(
            format!("`{}` contains `..` or a NUL", text.escape_debug()),
            "name a path inside the workspace, relative to its root",
        ));
    }
    globset::GlobBuilder::new(bare)
        .literal_separator(true)
        .case_insensitive(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| {
            problem(
                format!("`{}` is not a glob: {}", text.escape_debug(), e.kind()),
                "`*` matches within a name, `**` across directories, `[abc]` one of a set",
            )
        })?;
    Ok(text.to_string())
}

fn reason_of(doc: &Doc, key: &Key, value: &Value) -> Result<String, PolicyError> {
    let hint = "one line of plain text, e.g. reason = \"tool: runs the hooks it names\"";
    let text = doc.string(key, value, hint)?.trim();
    let what = if text.is_empty() {
        Some("is empty")
    } else if text.chars().any(char::is_control) {
        Some("must be one line, without control characters")
    } else if text.chars().count() > MAX_REASON_CHARS {
        Some("is longer than 200 characters")
    } else {
        None
    };
    match what {
        Some(what) => Err(doc.error(value.span(), format!("{} {what}", key.describe()), hint)),
        None => Ok(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_profile;
    use crate::error::PolicyError;
    use crate::profile::ToolConfigEntry;
    use std::path::Path;

    fn parse(text: &str) -> Result<crate::Profile, PolicyError> {
        parse_profile(text, "ci", Path::new("/etc/airlock/profiles/ci.toml"))
    }

    #[track_caller]
    fn refused(text: &str, line: usize, message: &str) {
        match parse(text) {
            Err(PolicyError::Invalid {
                line: l,
                message: m,
                hint,
                ..
            }) => {
                assert_eq!((l, m.as_str()), (line, message), "{text}");
                assert!(!hint.is_empty());
            }
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn entries_inline_or_as_tables() {
        let inline = "[apply]\ntool_config = [\n  { path = \".toolrc\", reason = \"tool: runs hooks\" },\n  { path = \"/deploy/*.yml\", reason = \"deploy\" },\n]\n";
        let p = parse(inline).unwrap();
        assert_eq!(
            p.apply.tool_config,
            vec![
                ToolConfigEntry {
                    path: ".toolrc".into(),
                    reason: "tool: runs hooks".into()
                },
                ToolConfigEntry {
                    path: "/deploy/*.yml".into(),
                    reason: "deploy".into()
                },
            ]
        );
        let tables = "[[apply.tool_config]]\npath = \".toolrc\"\nreason = \"tool: runs hooks\"\n\n[[apply.tool_config]]\npath = \"/deploy/*.yml\"\nreason = \"deploy\"\n";
        assert_eq!(parse(tables).unwrap().apply, p.apply);
        assert!(parse("").unwrap().apply.tool_config.is_empty());
    }

    #[test]
    fn bad_entries_are_refused_where_they_are_written() {
        refused(
            "[apply]\ntool_confg = []\n",
            2,
            "unknown key `tool_confg` in [apply]",
        );
        refused(
            "[apply]\ntool_config = [\".toolrc\"]\n",
            2,
            "an entry of `tool_config` in [apply] must be a table, not a string",
        );
        refused(
            "[apply]\ntool_config = [\n { path = \".toolrc\" },\n]\n",
            3,
            "an entry of `tool_config` in [apply] has no `reason`",
        );
        refused(
            "[apply]\ntool_config = [{ reason = \"x\" }]\n",
            2,
            "an entry of `tool_config` in [apply] has no `path`",
        );
        refused(
            "[apply]\ntool_config = [\n\n { path = \"a[\", reason = \"x\" }]\n",
            4,
            "`path` in [apply.tool_config]: `a[` is not a glob: unclosed character class; missing ']'",
        );
        refused(
            "[apply]\ntool_config = [{ path = \"../x\", reason = \"x\" }]\n",
            2,
            "`path` in [apply.tool_config]: `../x` contains `..` or a NUL",
        );
        refused(
            "[apply]\ntool_config = [{ path = \"/\", reason = \"x\" }]\n",
            2,
            "`path` in [apply.tool_config]: names no path",
        );
        refused(
            "[apply]\ntool_config = [{ path = \"x\", reason = \"a\\nb\" }]\n",
            2,
            "`reason` in [apply.tool_config] must be one line, without control characters",
        );
        refused(
            "[apply]\ntool_config = [{ path = \"x\", reason = \" \" }]\n",
            2,
            "`reason` in [apply.tool_config] is empty",
        );
        refused(
            "[apply]\ntool_config = [{ path = \"x\", reason = \"r\", run = 1 }]\n",
            2,
            "unknown key `run` in [apply.tool_config]",
        );
    }
}
