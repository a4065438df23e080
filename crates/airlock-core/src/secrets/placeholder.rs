//! Placeholders: what the sandbox holds in place of a secret. Random per session, so one is
//! useless anywhere else; the same shape as the value, so that a tool that checks a token's
//! shape accepts it; and, where the value has letters enough, spelling `airlock` after the
//! value's prefix, so that a person who meets one in a log knows what it is.
//!
//! Each ASCII lower-case letter, upper-case letter and digit is replaced by a random one of its
//! class (in a hex-only value, by a random hex digit); everything else is kept, as is a short
//! leading prefix such as `ghp_`, `sk-` or `xoxb-`.

use std::io::Read as _;
use std::path::Path;

/// The word a placeholder spells where it can.
const WORD: &[u8] = b"airlock";
/// A prefix is the value's leading run up to its first `_` or `-`, when at most this long.
const MAX_PREFIX_CHARS: usize = 8;
/// Random characters a placeholder must keep besides the spelled word (about 80 bits of
/// letters), so that spelling it never makes one session's placeholder guessable.
const MIN_RANDOM_BESIDES_WORD: usize = 16;

const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS: &[u8] = b"0123456789";
const HEX_LOWER: &[u8] = b"0123456789abcdef";
const HEX_UPPER: &[u8] = b"0123456789ABCDEF";

/// Random bytes from the kernel's generator.
pub(crate) struct Random {
    source: std::fs::File,
}

impl Random {
    pub(crate) fn open() -> std::io::Result<Random> {
        Ok(Random {
            source: std::fs::File::open(Path::new("/dev/urandom"))?,
        })
    }

    /// One of `alphabet`, each equally likely.
    fn pick(&mut self, alphabet: &[u8]) -> std::io::Result<u8> {
        let n = alphabet.len();
        // Bytes at or past the last whole multiple of n would favour the first letters.
        let limit = 256 - 256 % n;
        loop {
            let mut byte = [0u8; 1];
            self.source.read_exact(&mut byte)?;
            if usize::from(byte[0]) < limit {
                return Ok(alphabet[usize::from(byte[0]) % n]);
            }
        }
    }
}

/// How one character of the value becomes one of the placeholder.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Kept(char),
    Random(&'static [u8]),
    /// A letter of [`WORD`], in the case the value had there.
    Spelled(u8),
}

/// A placeholder for `value`, different from it; None when the value has no letter or digit
/// after its prefix, so that no placeholder of its shape could differ from it.
pub(crate) fn make(value: &str, random: &mut Random) -> std::io::Result<Option<String>> {
    let slots = slots(value);
    if !slots.iter().any(|s| matches!(s, Slot::Random(_))) {
        return Ok(None);
    }
    loop {
        let mut out = String::with_capacity(value.len());
        for slot in &slots {
            out.push(match *slot {
                Slot::Kept(c) => c,
                Slot::Random(alphabet) => char::from(random.pick(alphabet)?),
                Slot::Spelled(letter) => char::from(letter),
            });
        }
        // A value of a digit or two could come out as itself.
        if out != value {
            return Ok(Some(out));
        }
    }
}

/// What each character of `value` becomes.
fn slots(value: &str) -> Vec<Slot> {
    let prefix = prefix_len(value);
    let (head, body) = value.split_at(prefix);
    let hex = is_hex(body);
    let hex_digits = if body.bytes().any(|b| b.is_ascii_uppercase()) {
        HEX_UPPER
    } else {
        HEX_LOWER
    };
    let mut slots: Vec<Slot> = head.chars().map(Slot::Kept).collect();
    slots.extend(body.chars().map(|c| match c {
        _ if hex && c.is_ascii_uppercase() => Slot::Random(HEX_UPPER),
        _ if hex && c.is_ascii_lowercase() => Slot::Random(HEX_LOWER),
        _ if hex && c.is_ascii_digit() => Slot::Random(hex_digits),
        'a'..='z' => Slot::Random(LOWER),
        'A'..='Z' => Slot::Random(UPPER),
        '0'..='9' => Slot::Random(DIGITS),
        _ => Slot::Kept(c),
    }));
    if !hex {
        spell_word(&mut slots[head.chars().count()..]);
    }
    slots
}

/// The first letters of `body` spell [`WORD`], when it has letters enough and keeps
/// [`MIN_RANDOM_BESIDES_WORD`] random characters besides.
fn spell_word(body: &mut [Slot]) {
    let random = body.iter().filter(|s| matches!(s, Slot::Random(_))).count();
    let letters: Vec<usize> = body
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Slot::Random(a) if *a == LOWER || *a == UPPER))
        .map(|(i, _)| i)
        .take(WORD.len())
        .collect();
    if letters.len() < WORD.len() || random < WORD.len() + MIN_RANDOM_BESIDES_WORD {
        return;
    }
    for (&at, &letter) in letters.iter().zip(WORD) {
        let upper = body[at] == Slot::Random(UPPER);
        body[at] = Slot::Spelled(if upper {
            letter.to_ascii_uppercase()
        } else {
            letter
        });
    }
}

/// Bytes of the value's prefix (`ghp_`, `sk-`, `xoxb-`), kept as it is; 0 without one.
fn prefix_len(value: &str) -> usize {
    match value.char_indices().find(|(_, c)| matches!(c, '_' | '-')) {
        Some((at, _)) if value[..=at].chars().count() <= MAX_PREFIX_CHARS => at + 1,
        _ => 0,
    }
}

/// Every letter and digit a hex digit, with at least one letter among them (a value of digits
/// only stays digits anyway).
fn is_hex(body: &str) -> bool {
    let mut alphanumeric = body.chars().filter(char::is_ascii_alphanumeric).peekable();
    alphanumeric.peek().is_some()
        && body.chars().any(|c| c.is_ascii_alphabetic())
        && alphanumeric.all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholder(value: &str) -> String {
        make(value, &mut Random::open().unwrap()).unwrap().unwrap()
    }

    /// Same length, same class at every position (hex counted as one class), other characters
    /// kept.
    fn assert_same_shape(value: &str, placeholder: &str, hex: bool) {
        assert_eq!(value.chars().count(), placeholder.chars().count());
        for (v, p) in value.chars().zip(placeholder.chars()) {
            match v {
                _ if hex && v.is_ascii_hexdigit() => assert!(p.is_ascii_hexdigit(), "{p}"),
                'a'..='z' => assert!(p.is_ascii_lowercase(), "{v} -> {p}"),
                'A'..='Z' => assert!(p.is_ascii_uppercase(), "{v} -> {p}"),
                '0'..='9' => assert!(p.is_ascii_digit(), "{v} -> {p}"),
                _ => assert_eq!(v, p),
            }
        }
    }

    #[test]
    fn a_github_token_keeps_its_prefix_and_spells_airlock() {
        let value = "ghp_R8xKq2mZ7vTnW4pYs9LbC3dF6hJ1kA0eGuQi";
        let p = placeholder(value);
        assert!(p.starts_with("ghp_"), "{p}");
        assert_same_shape(value, &p, false);
        // R x K q m Z v: the first seven letters, in their case.
        let letters: String = p[4..]
            .chars()
            .filter(char::is_ascii_alphabetic)
            .take(7)
            .collect();
        assert_eq!(letters, "AiRloCk", "{p}");
        assert_ne!(p, value);
    }

    #[test]
    fn an_openai_key_keeps_only_the_first_run_as_prefix() {
        let value = "sk-proj-abcdefghijklmnopqrstuvwxyzABCDEF0123";
        let p = placeholder(value);
        assert!(p.starts_with("sk-airl-ock"), "{p}");
        assert_same_shape(value, &p, false);
        let slack = placeholder("xoxb-123456789012-abcdefghijklmnopqrstuvwx");
        assert!(slack.starts_with("xoxb-"), "{slack}");
        assert_eq!(&slack[18..25], "airlock", "{slack}");
    }

    #[test]
    fn a_long_first_run_is_not_a_prefix() {
        assert_eq!(prefix_len("ghp_x"), 4);
        assert_eq!(prefix_len("abcdefgh-x"), 0);
        assert_eq!(prefix_len("abcdefg-x"), 8);
        assert_eq!(prefix_len("noseparator"), 0);
    }

    #[test]
    fn a_hex_value_stays_hex_and_spells_nothing() {
        let value = "3f2a9c0d8e7b6a5f4e3d2c1b0a9f8e7d";
        let p = placeholder(value);
        assert_same_shape(value, &p, true);
        assert!(
            p.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{p}"
        );
        let upper = placeholder("DEADBEEF00112233");
        assert!(
            upper
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()),
            "{upper}"
        );
    }

    #[test]
    fn a_short_value_gets_a_placeholder_of_its_shape_without_the_word() {
        for value in ["xyz", "X9", "7", "pin-1234", "Ab1-x"] {
            let p = placeholder(value);
            assert_same_shape(value, &p, false);
            assert_ne!(p, value);
            assert!(!p.to_ascii_lowercase().contains("airlock"), "{p}");
        }
    }

    #[test]
    fn other_characters_and_non_ascii_text_are_kept() {
        let value = "päss.wörd/Ünïcode+=~ZZ99zz99zz99zz99zz99zz";
        let p = placeholder(value);
        assert_same_shape(value, &p, false);
        for c in ['ä', 'ö', 'Ü', 'ï', '.', '/', '+', '=', '~'] {
            assert!(p.contains(c), "{p}");
        }
    }

    #[test]
    fn a_value_without_letters_or_digits_has_no_placeholder() {
        let mut random = Random::open().unwrap();
        assert_eq!(make("--__..", &mut random).unwrap(), None);
        assert_eq!(make("ghp_", &mut random).unwrap(), None);
        assert_eq!(make("", &mut random).unwrap(), None);
    }

    #[test]
    fn two_placeholders_of_one_value_differ() {
        let value = "ghp_R8xKq2mZ7vTnW4pYs9LbC3dF6hJ1kA0eGuQi";
        assert_ne!(placeholder(value), placeholder(value));
        let hex = "3f2a9c0d8e7b6a5f4e3d2c1b0a9f8e7d";
        assert_ne!(placeholder(hex), placeholder(hex));
    }
}
