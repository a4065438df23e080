//! Typed access to a parsed TOML document that keeps every value's position, so that each error
//! can point at the exact key or value and say what was expected there.
//!
//! We walk toml's spanned document tree by hand rather than derive `Deserialize`: serde's messages
//! ("invalid type: string, expected u64") name neither the key nor the fix, and rewriting them
//! after the fact would depend on their wording.

use std::ops::Range;
use std::path::Path;

use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use crate::error::PolicyError;
use crate::units::{parse_duration, parse_size, UnitError};

pub(crate) type Value<'i> = Spanned<DeValue<'i>>;

/// The text being parsed and the file it came from: enough to turn a span into `path:line:col`.
pub(crate) struct Doc<'a> {
    pub text: &'a str,
    pub origin: &'a Path,
}

/// A table of the profile format and the keys it accepts.
pub(crate) struct Section {
    /// `None` for the top level, else the TOML table name, e.g. `limits`.
    pub name: Option<&'static str>,
    pub keys: &'static [&'static str],
}

/// One key of a [`Section`], used to word errors about its value.
#[derive(Clone)]
pub(crate) struct Key<'a> {
    pub section: &'a Section,
    pub name: &'a str,
    /// Where the key itself is written.
    pub span: Range<usize>,
    /// Errors are about one entry of the key's array, not the whole value.
    pub item: bool,
}

impl Key<'_> {
    /// How errors name the key: "`memory` in [limits]", "an entry of `hide` in [filesystem]",
    /// or "`network`" at the top level.
    pub fn describe(&self) -> String {
        let entry = if self.item { "an entry of " } else { "" };
        match self.section.name {
            Some(section) => format!("{entry}`{}` in [{section}]", self.name),
            None => format!("{entry}`{}`", self.name),
        }
    }

    /// The same key, for errors about one entry of its array.
    pub fn item(&self) -> Self {
        Key {
            item: true,
            ..self.clone()
        }
    }
}

impl<'a> Doc<'a> {
    pub fn parse(&self) -> Result<Spanned<DeTable<'a>>, PolicyError> {
        DeTable::parse(self.text).map_err(|e| {
            self.error(
                e.span().unwrap_or(0..0),
                e.message().trim_end(),
                "the file is not valid TOML (see https://toml.io)",
            )
        })
    }

    pub fn error(
        &self,
        span: Range<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> PolicyError {
        PolicyError::invalid(self.origin, self.text, span, message, hint)
    }

    /// The keys of `table` in the order they appear in the file, so that when several are wrong
    /// the error is about the first one. Whether each key is allowed is for the caller to say,
    /// with [`Doc::unknown_key`], so the list of keys and the code handling them cannot drift.
    pub fn entries<'t, 'i>(
        &self,
        table: &'t DeTable<'i>,
        section: &'t Section,
    ) -> Vec<(Key<'t>, &'t Value<'i>)> {
        let mut entries: Vec<_> = table
            .iter()
            .map(|(key, value)| {
                let key = Key {
                    section,
                    name: key.get_ref(),
                    span: key.span(),
                    item: false,
                };
                (key, value)
            })
            .collect();
        entries.sort_by_key(|(key, _)| key.span.start);
        entries
    }

    pub fn unknown_key(&self, key: &Key<'_>) -> PolicyError {
        let place = match key.section.name {
            Some(name) => format!("in [{name}]"),
            None => "at the top level".to_string(),
        };
        self.error(
            key.span.clone(),
            format!("unknown key `{}` {place}", key.name.escape_debug()),
            format!("expected one of {}", key.section.keys.join(", ")),
        )
    }

    /// The entries of a table in file order, with their key spans; for maps whose keys are data
    /// (`env.set`) rather than part of the format.
    pub fn map_entries<'t, 'i>(
        &self,
        key: &Key<'_>,
        value: &'t Value<'i>,
        example: &str,
    ) -> Result<Vec<(&'t Spanned<DeString<'i>>, &'t Value<'i>)>, PolicyError> {
        let DeValue::Table(table) = value.get_ref() else {
            return Err(self.wrong_type(key, value, "a table", example));
        };
        let mut entries: Vec<_> = table.iter().collect();
        entries.sort_by_key(|(key, _)| key.span().start);
        Ok(entries)
    }

    /// The body of a section, which may be written as `[name]` or as `name = { ... }`.
    pub fn table<'t, 'i>(
        &self,
        key: &Key<'_>,
        value: &'t Value<'i>,
    ) -> Result<&'t DeTable<'i>, PolicyError> {
        match value.get_ref() {
            DeValue::Table(table) => Ok(table),
            _ => Err(self.wrong_type(
                key,
                value,
                "a table",
                &format!("write a [{}] section with one key per line", key.name),
            )),
        }
    }

    pub fn string<'t>(
        &self,
        key: &Key<'_>,
        value: &'t Value<'_>,
        example: &str,
    ) -> Result<&'t str, PolicyError> {
        match value.get_ref() {
            DeValue::String(s) => Ok(s),
            _ => Err(self.wrong_type(key, value, "a string", example)),
        }
    }

    pub fn array<'t, 'i>(
        &self,
        key: &Key<'_>,
        value: &'t Value<'i>,
        example: &str,
    ) -> Result<&'t [Value<'i>], PolicyError> {
        match value.get_ref() {
            DeValue::Array(items) => Ok(items),
            _ => Err(self.wrong_type(key, value, "an array", example)),
        }
    }

    pub fn integer(
        &self,
        key: &Key<'_>,
        value: &Value<'_>,
        example: &str,
    ) -> Result<u64, PolicyError> {
        let DeValue::Integer(int) = value.get_ref() else {
            return Err(self.wrong_type(key, value, "a whole number", example));
        };
        let digits = int.as_str();
        if digits.starts_with('-') {
            return Err(self.error(
                value.span(),
                format!("{} must not be negative", key.describe()),
                example,
            ));
        }
        u64::from_str_radix(digits, int.radix()).map_err(|_| {
            self.error(
                value.span(),
                format!("{} is too large", key.describe()),
                example,
            )
        })
    }

    /// A byte count: an integer, or a string with a unit such as `"512MiB"`.
    pub fn size(
        &self,
        key: &Key<'_>,
        value: &Value<'_>,
        example: &str,
    ) -> Result<u64, PolicyError> {
        let expected = "a size like \"512MiB\" or a number of bytes";
        self.with_unit(key, value, example, expected, parse_size)
    }

    /// Whole seconds: an integer, or a string with a unit such as `"10m"`.
    pub fn duration(
        &self,
        key: &Key<'_>,
        value: &Value<'_>,
        example: &str,
    ) -> Result<u64, PolicyError> {
        let expected = "a duration like \"10m\" or a number of seconds";
        self.with_unit(key, value, example, expected, parse_duration)
    }

    fn with_unit(
        &self,
        key: &Key<'_>,
        value: &Value<'_>,
        example: &str,
        expected: &str,
        parse: fn(&str) -> Result<u64, UnitError>,
    ) -> Result<u64, PolicyError> {
        match value.get_ref() {
            DeValue::String(text) => parse(text).map_err(|e| {
                let message = format!("{}: {}", key.describe(), e.problem());
                self.error(value.span(), message, e.how())
            }),
            DeValue::Integer(_) => self.integer(key, value, example),
            _ => Err(self.wrong_type(key, value, expected, example)),
        }
    }

    fn wrong_type(
        &self,
        key: &Key<'_>,
        value: &Value<'_>,
        expected: &str,
        example: &str,
    ) -> PolicyError {
        self.wrong_type_of(&key.describe(), value, expected, example)
    }

    /// `subject` must be `expected` but `value` is something else.
    pub fn wrong_type_of(
        &self,
        subject: &str,
        value: &Value<'_>,
        expected: &str,
        hint: &str,
    ) -> PolicyError {
        let found = with_article(value.get_ref());
        self.error(
            value.span(),
            format!("{subject} must be {expected}, not {found}"),
            hint,
        )
    }
}

fn with_article(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}
