//! Sizes and durations as people write them in a profile: `"512MiB"`, `"10m"`.
//!
//! Only whole numbers are accepted: a limit is enforced exactly, so `"1.5G"` would have to be
//! rounded somewhere, and we would rather the file say the number that is enforced.
//!
//! A duration has this one grammar wherever airlock takes one: a profile's limits and the
//! command line's `gc --older-than`, `log --since`, `token create --expires`, `serve --grace`.
//! [`format_size`] and [`format_duration`] write a value back the way a person would, in a form
//! these parsers read as the same number.

use std::fmt;

/// Why a size or duration string was refused, and how to write one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    problem: String,
    how: &'static str,
}

impl UnitError {
    /// What is wrong, e.g. "unknown size unit `XB` in `2XB`".
    pub fn problem(&self) -> &str {
        &self.problem
    }

    /// How to write a valid value instead.
    pub fn how(&self) -> &'static str {
        self.how
    }
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.problem, self.how)
    }
}

impl std::error::Error for UnitError {}

const KIB: u64 = 1 << 10;

/// Size suffixes, matched case-insensitively. `K`/`M`/`G`/`T` are binary because that is what
/// `ulimit`, `docker --memory` and systemd mean by them; only the explicit `KB`/`MB`/... are
/// decimal.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", KIB),
    ("kib", KIB),
    ("kb", 1_000),
    ("m", KIB * KIB),
    ("mib", KIB * KIB),
    ("mb", 1_000_000),
    ("g", KIB * KIB * KIB),
    ("gib", KIB * KIB * KIB),
    ("gb", 1_000_000_000),
    ("t", KIB * KIB * KIB * KIB),
    ("tib", KIB * KIB * KIB * KIB),
    ("tb", 1_000_000_000_000),
];

const DURATION_UNITS: &[(&str, u64)] = &[("", 1), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)];

/// Parses a byte size: `"4096"`, `"512MiB"`, `"2 G"`, `"10MB"`.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    parse_with_units(
        text,
        SIZE_UNITS,
        "size",
        "write a whole number with an optional unit, e.g. \"512MiB\", \"2GiB\" or \"4096\" \
         (units: B, K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
    )
}

/// Parses a duration in whole seconds: `"90"`, `"90s"`, `"10m"`, `"2h"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<u64, UnitError> {
    parse_with_units(
        text,
        DURATION_UNITS,
        "duration",
        "write whole seconds or a number with s, m, h or d, e.g. \"90s\", \"10m\", \"2h\", \"7d\"",
    )
}

/// A small size for a person: `1 byte`, `368 bytes`.
pub fn counted_bytes(bytes: u64) -> String {
    format!("{bytes} byte{}", if bytes == 1 { "" } else { "s" })
}

/// `bytes` as a person writes a size: in the largest binary unit that holds it exactly
/// (`"2GiB"`, `"512MiB"`), else the largest decimal one (`"10MB"`), else in bytes (`"4097"`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 8] = [
        ("TiB", KIB * KIB * KIB * KIB),
        ("GiB", KIB * KIB * KIB),
        ("MiB", KIB * KIB),
        ("KiB", KIB),
        ("TB", 1_000_000_000_000),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
    ];
    format_in(bytes, &UNITS)
}

/// `seconds` as a person writes a duration: in the largest unit that holds it exactly (`"1h"`,
/// `"90m"`, `"7d"`), else in seconds (`"61s"`).
pub fn format_duration(seconds: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)];
    format_in(seconds, &UNITS)
}

fn format_in(value: u64, units: &[(&str, u64)]) -> String {
    units
        .iter()
        .find(|(_, factor)| value != 0 && value.is_multiple_of(*factor))
        .map_or_else(
            || value.to_string(),
            |(unit, factor)| format!("{}{unit}", value / factor),
        )
}

fn parse_with_units(
    text: &str,
    units: &[(&str, u64)],
    what: &str,
    how: &'static str,
) -> Result<u64, UnitError> {
    let error = |problem: String| UnitError { problem, how };
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let unit = unit.trim_start();
    if digits.is_empty() {
        return Err(error(format!("`{text}` is not a {what}")));
    }
    let Some(&(_, factor)) = units.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(error(format!("unknown {what} unit `{unit}` in `{text}`")));
    };
    let too_large = || error(format!("{what} `{text}` is too large"));
    // The digits are all ASCII digits, so the only way `parse` fails is overflow.
    let number: u64 = digits.parse().map_err(|_| too_large())?;
    number.checked_mul(factor).ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_binary_and_decimal() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("1KB"), Ok(1000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("3M"), Ok(3 << 20));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("1TB"), Ok(1_000_000_000_000));
    }

    #[test]
    fn sizes_allow_spaces_and_any_case() {
        assert_eq!(parse_size(" 2 gib "), Ok(2 << 30));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
    }

    #[test]
    fn size_errors() {
        for bad in ["", "GiB", "-1", "1.5GiB", "2XB", "2 G B", "+3", "1e9"] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be refused");
        }
        let err = parse_size("2XB").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown size unit `XB` in `2XB`; "),
            "{err}"
        );
    }

    #[test]
    fn size_overflow_is_an_error_not_a_panic() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("18446744073709551616").is_err());
        assert!(parse_size("99999999999999999999999999999").is_err());
        assert!(parse_size("16777216TiB").is_err());
        assert_eq!(
            parse_size("16777216TiB").unwrap_err().problem(),
            "size `16777216TiB` is too large"
        );
        assert_eq!(parse_size("16777215TiB"), Ok(16_777_215 << 40));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("10m"), Ok(600));
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("2 H"), Ok(7200));
        assert_eq!(parse_duration("7d"), Ok(7 * 86_400));
    }

    #[test]
    fn sizes_and_durations_are_written_back_as_people_write_them() {
        assert_eq!(format_size(2 << 30), "2GiB");
        assert_eq!(format_size(512 << 20), "512MiB");
        assert_eq!(format_size(1536 << 20), "1536MiB");
        assert_eq!(format_size(10_000_000), "10MB");
        assert_eq!(format_size(4097), "4097");
        assert_eq!(format_size(0), "0");
        assert_eq!(format_duration(3600), "1h");
        assert_eq!(format_duration(5400), "90m");
        assert_eq!(format_duration(7 * 86_400), "7d");
        assert_eq!(format_duration(61), "61s");
        assert_eq!(format_duration(0), "0");
    }

    #[test]
    fn what_is_written_back_reads_as_the_same_number() {
        let values = [0, 1, 59, 60, 1000, 1024, 4097, 86_400, 3 << 40, u64::MAX];
        for value in values {
            assert_eq!(parse_size(&format_size(value)), Ok(value));
            assert_eq!(parse_duration(&format_duration(value)), Ok(value));
        }
    }

    #[test]
    fn duration_errors() {
        for bad in ["", "m", "1w", "1h30m", "1.5h", "-5s", "10ms", "7days"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_duration("5124095576030432h").is_err());
        assert!(parse_duration("99999999999999999999").is_err());
    }
}
