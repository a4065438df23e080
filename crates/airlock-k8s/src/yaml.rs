//! JSON values written as YAML for people to read and `kubectl` to take. Every string that is
//! not plainly a word is written double-quoted in JSON's escapes (a subset of YAML's), so no
//! value can be read back as another type or break out of its place; a multi-line text (a
//! profile in a ConfigMap) is a literal block when that keeps it byte for byte, quoted when not.

use serde_json::Value;

/// `documents` as one YAML stream: `header` as comment lines, then each document after `---`.
pub fn stream(header: &[String], documents: &[Value]) -> String {
    let mut out = String::new();
    for line in header {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    for document in documents {
        out.push_str("---\n");
        block(&mut out, document, 0);
    }
    out
}

/// A value that starts on a line of its own at `indent`.
fn block(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, item) in in_reading_order(map) {
                pad(out, indent);
                out.push_str(&key_text(key));
                out.push(':');
                after_key(out, item, indent);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                pad(out, indent);
                out.push('-');
                list_item(out, item, indent);
            }
        }
        other => {
            pad(out, indent);
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// What follows `key:` at `indent`: a scalar on the same line, a collection below it.
fn after_key(out: &mut String, item: &Value, indent: usize) {
    match item {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            block(out, item, indent + 2);
        }
        // A list's dashes in line with its key, as kubectl writes them.
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            block(out, item, indent);
        }
        Value::String(text) if literal_block_fits(text) => {
            out.push(' ');
            literal_block(out, text, indent + 2);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// What follows `-` at `indent`: a mapping's first key on the same line, its others below.
fn list_item(out: &mut String, item: &Value, indent: usize) {
    match item {
        Value::Object(map) if !map.is_empty() => {
            let mut first = true;
            for (key, value) in in_reading_order(map) {
                if first {
                    out.push(' ');
                    first = false;
                } else {
                    pad(out, indent + 2);
                }
                out.push_str(&key_text(key));
                out.push(':');
                after_key(out, value, indent + 2);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            block(out, item, indent + 2);
        }
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

/// The keys a reader looks for first (what an object is, what it is called), then the rest in
/// the map's own (sorted) order.
fn in_reading_order(map: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    const FIRST: &[&str] = &["apiVersion", "kind", "metadata", "name", "namespace"];
    let rank = |key: &str| {
        FIRST
            .iter()
            .position(|first| *first == key)
            .unwrap_or(FIRST.len())
    };
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    // Stable: keys of the same rank keep the map's order.
    entries.sort_by_key(|(key, _)| rank(key));
    entries
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A scalar, or an empty collection, on one line.
fn inline(value: &Value) -> String {
    match value {
        Value::String(text) => scalar_text(text),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        // Numbers, booleans and null are the same in both languages.
        other => other.to_string(),
    }
}

fn key_text(key: &str) -> String {
    scalar_text(key)
}

/// A string plain when it can only be read as that string, else double-quoted: JSON's escapes,
/// and `\uXXXX` besides for what JSON leaves raw but YAML would not read back as it is (DEL, the
/// C1 controls, the byte-order mark, the non-characters, and NEL and the Unicode line and
/// paragraph separators, which YAML takes for line breaks and folds).
fn scalar_text(text: &str) -> String {
    if is_plain_word(text) {
        return text.to_string();
    }
    let json = Value::String(text.to_string()).to_string();
    let mut quoted = String::with_capacity(json.len());
    for c in json.chars() {
        if yaml_reads_back(c) {
            quoted.push(c);
        } else {
            quoted.push_str(&format!("\\u{:04x}", u32::from(c)));
        }
    }
    quoted
}

/// Whether `c`, written as it is inside a scalar, reads back as itself: YAML's printable
/// characters (its spec, 5.1) but for the ones it takes as line breaks or a byte-order mark.
fn yaml_reads_back(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x20'..='\x7e' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// Letters first, then letters, digits and `._/-`; never one of YAML 1.1's words for a
/// boolean or null (which some readers still take as such).
fn is_plain_word(text: &str) -> bool {
    const SPECIAL_WORDS: &[&str] = &[
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf",
    ];
    let mut chars = text.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    starts_well
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && !SPECIAL_WORDS.iter().any(|w| w.eq_ignore_ascii_case(text))
}

/// A literal block reads back as exactly `text` when: it has a line besides its trailing
/// newlines, only characters that read back as themselves besides its newlines and tabs (no
/// carriage return, no NEL or Unicode line separator, which YAML would take for line breaks), and
/// no line only of blanks (which YAML may read as an empty line). Its indentation is written
/// out (`|2`), so a first line that starts with a blank or an empty one is kept as it is.
fn literal_block_fits(text: &str) -> bool {
    let body = text.trim_end_matches('\n');
    !body.is_empty()
        && text.contains('\n')
        && text
            .chars()
            .all(|c| c == '\n' || c == '\t' || (c != '\r' && yaml_reads_back(c)))
        && text
            .split('\n')
            .all(|line| line.is_empty() || !line.chars().all(|c| c == ' ' || c == '\t'))
}

/// `text` as `|2`, `|2-` or `|2+` (one, no or more trailing newlines kept), its lines at `indent`
/// (always two more than its key's, as the indicator says).
fn literal_block(out: &mut String, text: &str, indent: usize) {
    let body = text.trim_end_matches('\n');
    let trailing = text.len() - body.len();
    // The indentation indicator: the block's lines are `indent` in from its key's, whatever
    // its first line starts with.
    out.push_str(match trailing {
        0 => "|2-",
        1 => "|2",
        _ => "|2+",
    });
    out.push('\n');
    let mut lines: Vec<&str> = body.split('\n').collect();
    // With `|+`, the newlines after the last line are kept as empty lines.
    lines.extend(std::iter::repeat_n("", trailing.saturating_sub(1)));
    for line in lines {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_are_plain_and_everything_else_quoted() {
        assert_eq!(scalar_text("airlock"), "airlock");
        assert_eq!(
            scalar_text("app.kubernetes.io/name"),
            "app.kubernetes.io/name"
        );
        for quoted in [
            "",
            "yes",
            "No",
            "null",
            "1.0",
            "0.0.0.0:8888",
            "--listen",
            "*.ns.svc",
            "a b",
            "a: b",
            "a#b",
            "ünï",
            "x\u{85}y",
            "x\u{2028}y",
            "x\u{2029}y",
            "x\u{7f}y",
            "x\u{9f}y",
            "\u{feff}x",
            "x\u{fffe}\u{ffff}",
        ] {
            let text = scalar_text(quoted);
            assert!(text.starts_with('"'), "{quoted:?} -> {text}");
            assert!(text.chars().all(yaml_reads_back), "{quoted:?} -> {text}");
            assert_eq!(serde_json::from_str::<String>(&text).unwrap(), quoted);
        }
    }

    #[test]
    fn nesting_as_kubectl_writes_it() {
        let doc = json!({
            "kind": "Pod",
            "spec": {"containers": [{"name": "a", "args": ["serve", "--x"], "ports": []}]},
            "empty": {},
            "n": 3,
            "b": false,
        });
        assert_eq!(
            stream(&["made by a test".into()], &[doc]),
            "# made by a test\n---\nkind: Pod\nb: false\nempty: {}\n\"n\": 3\nspec:\n  containers:\n  - name: a\n    args:\n    - serve\n    - \"--x\"\n    ports: []\n"
        );
    }

    #[test]
    fn texts_as_literal_blocks_only_where_they_read_back_whole() {
        let block_of = |text: &str| {
            let mut out = String::new();
            after_key(&mut out, &json!(text), 0);
            out
        };
        assert_eq!(block_of("a = 1\n\nb = 2\n"), " |2\n  a = 1\n\n  b = 2\n");
        assert_eq!(block_of("a\nb"), " |2-\n  a\n  b\n");
        assert_eq!(block_of("a\n\n\n"), " |2+\n  a\n\n\n");
        assert_eq!(block_of(" leading\nspace\n"), " |2\n   leading\n  space\n");
        assert_eq!(block_of("\n  [limits]\n"), " |2\n\n    [limits]\n");
        for quoted in [
            "one line",
            "\n",
            "blank\n  \nline",
            "cr\r\n",
            "bell\u{7}\n",
            "# para\u{2029}  README: |\n",
            "line\u{2028}sep\n",
            "nel\u{85}\n",
            "bom\u{feff}\n",
        ] {
            let out = block_of(quoted);
            assert!(out.starts_with(" \""), "{quoted:?} -> {out}");
        }
    }
}
