use std::collections::BTreeMap;

use super::*;

const ORIGIN: &str = "/etc/airlock/profiles/ci.toml";

fn parse(text: &str) -> Result<Profile, PolicyError> {
    parse_profile(text, "ci", Path::new(ORIGIN))
}

/// `(line, column, message, hint)` of the error `text` must produce.
#[track_caller]
fn invalid(text: &str) -> (usize, usize, String, String) {
    match parse(text) {
        Err(PolicyError::Invalid {
            path,
            line,
            column,
            message,
            hint,
        }) => {
            assert_eq!(path, Path::new(ORIGIN));
            (line, column, message, hint)
        }
        other => panic!("expected an Invalid error for {text:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_invalid(text: &str, line: usize, column: usize, message: &str) {
    let (l, c, m, hint) = invalid(text);
    assert_eq!((l, c, m.as_str()), (line, column, message), "for {text:?}");
    assert!(!hint.is_empty(), "every error says what to do");
}

const FULL_EXAMPLE: &str = r#"# all sections optional; missing keys take the built-in defaults
network = "none"

[filesystem]
read_only = ["/opt/tools"]
read_write = ["/srv/cache"]
hide = ["/opt/tools/private"]

[env]
allow = ["CI", "GITHUB_*"]
set = { RUST_LOG = "info" }

[limits]
memory = "2GiB"
processes = 256
cpu = "10m"
timeout = "30m"
tmp_size = "512MiB"
output = "16MiB"
open_files = 1024
cpus = 1.5
disk = "10GiB"
files = 100000
"#;

#[test]
fn empty_file_is_the_defaults_with_name_and_source() {
    let p = parse("").unwrap();
    assert_eq!(
        p,
        Profile {
            name: "ci".into(),
            source: Some(ORIGIN.into()),
            ..Profile::builtin_default()
        }
    );
    assert_eq!(parse("# only a comment\n\n").unwrap(), p);
    assert_eq!(parse("[filesystem]\n[env]\n[limits]\n").unwrap(), p);
}

#[test]
fn full_example_parses() {
    let p = parse(FULL_EXAMPLE).unwrap();
    assert_eq!(p.name, "ci");
    assert_eq!(p.source, Some(PathBuf::from(ORIGIN)));
    assert_eq!(p.network, NetworkMode::None);
    assert_eq!(
        p.filesystem,
        Filesystem {
            read_only: vec!["/opt/tools".into()],
            read_write: vec!["/srv/cache".into()],
            hide: vec!["/opt/tools/private".into()],
        }
    );
    assert_eq!(
        p.env,
        EnvPolicy {
            allow: vec!["CI".into(), "GITHUB_*".into()],
            set: BTreeMap::from([("RUST_LOG".to_string(), "info".to_string())]),
        }
    );
    assert_eq!(
        p.limits,
        Limits {
            memory_bytes: 2 << 30,
            processes: 256,
            cpu_seconds: 600,
            timeout_seconds: Some(1800),
            tmp_bytes: 512 << 20,
            output_bytes: 16 << 20,
            open_files: 1024,
            millicpus: Some(1500),
            disk_bytes: Some(10 << 30),
            files: Some(100_000),
        }
    );
    assert!(p.env_allowed("GITHUB_REF"));
}

#[test]
fn crate_docs_example_parses() {
    // The format section of the crate docs, kept in sync by hand: every key in it must be valid.
    let docs = include_str!("../lib.rs");
    let example: String = docs
        .lines()
        .skip_while(|l| *l != "//! ```toml")
        .skip(1)
        .take_while(|l| *l != "//! ```")
        .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
        .collect();
    assert!(
        example.contains("open_files"),
        "example not found in lib.rs"
    );
    assert_eq!(
        parse(&example).unwrap().limits,
        parse(FULL_EXAMPLE).unwrap().limits
    );
}

#[test]
fn missing_keys_keep_their_defaults() {
    let p = parse("[limits]\nprocesses = 64\n").unwrap();
    assert_eq!(
        p.limits,
        Limits {
            processes: 64,
            ..Limits::default()
        }
    );
}

#[test]
fn other_toml_spellings_of_the_same_profile() {
    let inline =
        parse("limits = { memory = \"1G\", open_files = 64 }\nenv = { set = { A = \"1\" } }\n")
            .unwrap();
    let dotted =
        parse("limits.memory = 1073741824\nlimits.open_files = 64\nenv.set.A = \"1\"\n").unwrap();
    let headers =
        parse("[limits]\nmemory = \"1GiB\"\nopen_files = 0x40\n[env.set]\nA = \"1\"\n").unwrap();
    assert_eq!(inline, dotted);
    assert_eq!(inline, headers);
    assert_eq!(inline.limits.memory_bytes, 1 << 30);
    assert_eq!(inline.limits.open_files, 64);
}

#[test]
fn integers_and_strings_both_work_for_sizes_and_durations() {
    let p = parse("[limits]\nmemory = 33554432\ncpu = 90\ntimeout = \"2h\"\noutput = \"1_000\"\n");
    // TOML allows `_` in integer literals, not inside our strings.
    assert!(p.is_err());
    let p = parse("[limits]\nmemory = 33_554_432\ncpu = 90\ntimeout = \"2h\"\noutput = \"1000\"\n")
        .unwrap();
    assert_eq!(p.limits.memory_bytes, 32 << 20);
    assert_eq!(p.limits.cpu_seconds, 90);
    assert_eq!(p.limits.timeout_seconds, Some(7200));
    assert_eq!(p.limits.output_bytes, 1000);
}

#[test]
fn durations_take_days_as_the_command_line_does() {
    let p = parse("[limits]\ntimeout = \"7d\"\n").unwrap();
    assert_eq!(p.limits.timeout_seconds, Some(7 * 86_400));
}

#[test]
fn zero_timeout_means_none() {
    for text in [
        "[limits]\ntimeout = 0\n",
        "[limits]\ntimeout = \"0\"\n",
        "[limits]\ntimeout = \"0s\"\n",
    ] {
        assert_eq!(parse(text).unwrap().limits.timeout_seconds, None, "{text}");
    }
}

#[test]
fn paths_are_normalised() {
    let p = parse("[filesystem]\nread_only = [\"/opt//tools/./bin/\", \"/\"]\n").unwrap();
    assert_eq!(
        p.filesystem.read_only,
        [PathBuf::from("/opt/tools/bin"), PathBuf::from("/")]
    );
}

#[test]
fn limits_at_their_bounds_are_accepted() {
    let p = parse(
        "[limits]\nmemory = \"16MiB\"\nprocesses = 1_000_000\ncpu = 1\ntmp_size = 1\noutput = 1\nopen_files = 16\n",
    )
    .unwrap();
    assert_eq!(p.limits.memory_bytes, 16 << 20);
    assert_eq!(p.limits.processes, 1_000_000);
    assert_eq!(p.limits.open_files, 16);
    assert_eq!(
        parse("[limits]\nprocesses = 1\n").unwrap().limits.processes,
        1
    );
}

#[test]
fn full_error_text_names_file_line_column_and_what_to_do() {
    let text = "network = \"none\"\n\n[limits]\nmemory = \"2GiB\"\n\n\n  memroy = 3\n";
    assert_eq!(
        parse(text).unwrap_err().to_string(),
        "/etc/airlock/profiles/ci.toml:7:3: unknown key `memroy` in [limits]; expected one of \
         memory, processes, cpu, timeout, tmp_size, output, open_files, cpus, disk, files"
    );
    assert_eq!(
        parse("network = \"everything\"\n").unwrap_err().to_string(),
        "/etc/airlock/profiles/ci.toml:1:11: network = \"everything\" is not a network mode; \
         write network = \"none\", network = \"open\", or network = { allow = [\"github.com\", \"*.pypi.org:443\"] }"
    );
}

#[test]
fn network_modes() {
    use airlock_rules::{Destination, Egress};
    let d = |t: &str| Destination::parse(t).unwrap();
    assert_eq!(parse("").unwrap().network, Egress::None);
    assert_eq!(
        parse("network = \"open\"\n").unwrap().network,
        Egress::Open {
            allow: vec![],
            deny: vec![]
        }
    );
    assert_eq!(
        parse("[network]\nallow = [\"github.com\", \"*.pypi.org:443\", \"10.0.0.5:5432\"]\ndeny = [\"evil.pypi.org\"]\n")
            .unwrap()
            .network,
        Egress::Allow {
            allow: vec![d("github.com"), d("*.pypi.org:443"), d("10.0.0.5:5432")],
            deny: vec![d("evil.pypi.org")]
        }
    );
    assert_eq!(
        parse("network = { open = true, deny = [\"169.254.0.0/16\"] }\n")
            .unwrap()
            .network,
        Egress::Open {
            allow: vec![],
            deny: vec![d("169.254.0.0/16")]
        }
    );
    // A bad entry is named where it stands.
    assert_invalid(
        "[network]\nallow = [\"github.com\", \"https://x.test\"]\n",
        2,
        24,
        "an entry of `allow` in [network]: \"https://x.test\": write a host, not a URL: github.com or github.com:443",
    );
    assert_invalid(
        "[network]\nalow = []\n",
        2,
        1,
        "unknown key `alow` in [network]",
    );
}

#[test]
fn syntax_errors() {
    assert_invalid("[limits\n", 1, 8, "unclosed table, expected `]`");
    assert_invalid(
        "network = \"none\"\nnetwork = \"none\"\n",
        2,
        1,
        "duplicate key",
    );
    assert_invalid("[limits]\n[limits]\n", 2, 2, "duplicate key");
    let (_, _, _, hint) = invalid("x = \n");
    assert!(hint.contains("not valid TOML"), "{hint}");
}

#[test]
fn unknown_keys_everywhere() {
    assert_invalid(
        "networks = \"none\"\n",
        1,
        1,
        "unknown key `networks` at the top level",
    );
    assert_invalid(
        "[filesystem]\nreadonly = []\n",
        2,
        1,
        "unknown key `readonly` in [filesystem]",
    );
    assert_invalid(
        "[env]\n\nallow = []\npass = []\n",
        4,
        1,
        "unknown key `pass` in [env]",
    );
    assert_invalid(
        "[limits]\nmemroy = 3\n",
        2,
        1,
        "unknown key `memroy` in [limits]",
    );
    assert_invalid(
        "limits = { processes = 5, memroy = 3 }\n",
        1,
        27,
        "unknown key `memroy` in [limits]",
    );
    assert_invalid(
        "limits.memroy = 3\n",
        1,
        8,
        "unknown key `memroy` in [limits]",
    );
    let (_, _, _, hint) = invalid("[env]\npass = []\n");
    assert_eq!(hint, "expected one of allow, set");
    let (_, _, _, hint) = invalid("[filesystem]\nro = []\n");
    assert_eq!(hint, "expected one of read_only, read_write, hide");
    let (_, _, _, hint) = invalid("foo = 1\n");
    assert_eq!(
        hint,
        "expected one of network, filesystem, env, limits, apply, secret"
    );
}

#[test]
fn the_first_error_in_the_file_is_reported() {
    // BTreeMap order would put `cpu` first; the file has `zzz` first.
    assert_invalid(
        "[limits]\nzzz = 1\ncpu = \"x\"\n",
        2,
        1,
        "unknown key `zzz` in [limits]",
    );
}

#[test]
fn wrong_types() {
    assert_invalid(
        "network = 3\n",
        1,
        11,
        "`network` must be a string or a table, not an integer",
    );
    assert_invalid(
        "limits = \"big\"\n",
        1,
        10,
        "`limits` must be a table, not a string",
    );
    assert_invalid(
        "filesystem = []\n",
        1,
        14,
        "`filesystem` must be a table, not an array",
    );
    assert_invalid("env = true\n", 1, 7, "`env` must be a table, not a boolean");
    assert_invalid(
        "[limits]\nprocesses = \"256\"\n",
        2,
        13,
        "`processes` in [limits] must be a whole number, not a string",
    );
    assert_invalid(
        "[limits]\nprocesses = 1.5\n",
        2,
        13,
        "`processes` in [limits] must be a whole number, not a float",
    );
    assert_invalid(
        "[limits]\nopen_files = 1979-05-27\n",
        2,
        14,
        "`open_files` in [limits] must be a whole number, not a date",
    );
    assert_invalid(
        "[limits]\nmemory = true\n",
        2,
        10,
        "`memory` in [limits] must be a size like \"512MiB\" or a number of bytes, not a boolean",
    );
    assert_invalid(
        "[limits]\ncpu = 1.5\n",
        2,
        7,
        "`cpu` in [limits] must be a duration like \"10m\" or a number of seconds, not a float",
    );
    assert_invalid(
        "[filesystem]\nread_only = \"/opt\"\n",
        2,
        13,
        "`read_only` in [filesystem] must be an array, not a string",
    );
    assert_invalid(
        "[filesystem]\nhide = [\"/a\", 1]\n",
        2,
        15,
        "an entry of `hide` in [filesystem] must be a string, not an integer",
    );
    assert_invalid(
        "[env]\nallow = \"CI\"\n",
        2,
        9,
        "`allow` in [env] must be an array, not a string",
    );
    assert_invalid(
        "[env]\nallow = [[\"CI\"]]\n",
        2,
        10,
        "an entry of `allow` in [env] must be a string, not an array",
    );
    assert_invalid(
        "[env]\nset = [\"A=1\"]\n",
        2,
        7,
        "`set` in [env] must be a table, not an array",
    );
    assert_invalid(
        "[env]\nset = { JOBS = 4 }\n",
        2,
        16,
        "the value of `JOBS` in [env] set must be a string, not an integer",
    );
    assert_invalid(
        "[env.set]\nA = \"1\"\nB = { C = \"2\" }\n",
        3,
        5,
        "the value of `B` in [env] set must be a string, not a table",
    );
}

#[test]
fn integer_range_errors() {
    assert_invalid(
        "[limits]\nprocesses = -3\n",
        2,
        13,
        "`processes` in [limits] must not be negative",
    );
    assert_invalid(
        "[limits]\nprocesses = 99999999999999999999999\n",
        2,
        13,
        "`processes` in [limits] is too large",
    );
    assert_invalid(
        "[limits]\nmemory = -1\n",
        2,
        10,
        "`memory` in [limits] must not be negative",
    );
    assert_invalid(
        "[limits]\ncpu = -1\n",
        2,
        7,
        "`cpu` in [limits] must not be negative",
    );
}

#[test]
fn unit_errors_in_strings() {
    assert_invalid(
        "[limits]\nmemory = \"99999999999999999999GiB\"\n",
        2,
        10,
        "`memory` in [limits]: size `99999999999999999999GiB` is too large",
    );
    assert_invalid(
        "[limits]\nmemory = \"16777216TiB\"\n",
        2,
        10,
        "`memory` in [limits]: size `16777216TiB` is too large",
    );
    assert_invalid(
        "[limits]\ntmp_size = \"2XB\"\n",
        2,
        12,
        "`tmp_size` in [limits]: unknown size unit `XB` in `2XB`",
    );
    assert_invalid(
        "[limits]\ntimeout = \"1w\"\n",
        2,
        11,
        "`timeout` in [limits]: unknown duration unit `w` in `1w`",
    );
    assert_invalid(
        "[limits]\ncpu = \"99999999999999999999h\"\n",
        2,
        7,
        "`cpu` in [limits]: duration `99999999999999999999h` is too large",
    );
    assert_invalid(
        "[limits]\noutput = \"\"\n",
        2,
        10,
        "`output` in [limits]: `` is not a size",
    );
}

#[test]
fn limit_minimums_and_maximums() {
    assert_invalid(
        "[limits]\nmemory = \"1MiB\"\n",
        2,
        10,
        "`memory` in [limits] is below the minimum of 16MiB",
    );
    assert_invalid(
        "[limits]\nmemory = 16777215\n",
        2,
        10,
        "`memory` in [limits] is below the minimum of 16MiB",
    );
    assert_invalid(
        "[limits]\nprocesses = 0\n",
        2,
        13,
        "`processes` in [limits] must be between 1 and 1000000",
    );
    assert_invalid(
        "[limits]\nprocesses = 1000001\n",
        2,
        13,
        "`processes` in [limits] must be between 1 and 1000000",
    );
    assert_invalid(
        "[limits]\ntmp_size = 0\n",
        2,
        12,
        "`tmp_size` in [limits] must be more than 0",
    );
    assert_invalid(
        "[limits]\noutput = \"0B\"\n",
        2,
        10,
        "`output` in [limits] must be more than 0",
    );
    assert_invalid(
        "[limits]\nopen_files = 15\n",
        2,
        14,
        "`open_files` in [limits] is below the minimum of 16",
    );
    assert_invalid(
        "[limits]\ncpu = \"0m\"\n",
        2,
        7,
        "`cpu` in [limits] is 0, which would kill the command before it starts",
    );
}

#[test]
fn network_mode_names_are_exact() {
    assert_eq!(
        parse("network = \"none\"\n").unwrap().network,
        NetworkMode::None
    );
    assert_invalid(
        "network = \"None\"\n",
        1,
        11,
        "network = \"None\" is not a network mode",
    );
}

#[test]
fn bad_paths() {
    assert_invalid(
        "[filesystem]\nread_only = [\"/ok\", \"opt/tools\"]\n",
        2,
        21,
        "an entry of `read_only` in [filesystem]: `opt/tools` is not an absolute path",
    );
    assert_invalid(
        "[filesystem]\nread_write = [\"~/.cache\"]\n",
        2,
        15,
        "an entry of `read_write` in [filesystem]: `~/.cache` is not an absolute path",
    );
    assert_invalid(
        "[filesystem]\nread_write = [\"\"]\n",
        2,
        15,
        "an entry of `read_write` in [filesystem]: empty path",
    );
    assert_invalid(
        "[filesystem]\nread_only = [\"/srv/app/../../etc\"]\n",
        2,
        14,
        "an entry of `read_only` in [filesystem]: `/srv/app/../../etc` contains `..`",
    );
    assert_invalid(
        "[filesystem]\nhide = [\"/..\"]\n",
        2,
        9,
        "an entry of `hide` in [filesystem]: `/..` contains `..`",
    );
    assert_invalid(
        "[filesystem]\nhide = [\"/tmp\", \"/\"]\n",
        2,
        17,
        "an entry of `hide` in [filesystem]: hiding `/` would hide everything",
    );
    assert_invalid(
        "[filesystem]\nhide = [\"//./\"]\n",
        2,
        9,
        "an entry of `hide` in [filesystem]: hiding `/` would hide everything",
    );
    // A `..`-looking file name is a real name, not a parent reference.
    let p = parse("[filesystem]\nhide = [\"/srv/..data\"]\n").unwrap();
    assert_eq!(p.filesystem.hide, [PathBuf::from("/srv/..data")]);
}

#[test]
fn bad_env_names_and_values() {
    assert_invalid(
        "[env]\nallow = [\"CI\", \"\"]\n",
        2,
        16,
        "an entry of `allow` in [env]: empty variable name",
    );
    assert_invalid(
        "[env]\nallow = [\"A=B\"]\n",
        2,
        10,
        "an entry of `allow` in [env]: `A=B` contains `=`",
    );
    assert_invalid(
        "[env]\nallow = [\"A\\u0000B\"]\n",
        2,
        10,
        "an entry of `allow` in [env]: `A\\0B` contains a NUL character",
    );
    assert_invalid(
        "[env]\nallow = [\"GITHUB_*_TOKEN\"]\n",
        2,
        10,
        "an entry of `allow` in [env]: `GITHUB_*_TOKEN` has `*` before its end",
    );
    assert_invalid(
        "[env]\nallow = [\"A**\"]\n",
        2,
        10,
        "an entry of `allow` in [env]: `A**` has `*` before its end",
    );
    assert_invalid(
        "[env]\nset = { \"\" = \"x\" }\n",
        2,
        9,
        "a variable name in [env] set: empty variable name",
    );
    assert_invalid(
        "[env.set]\nOK = \"1\"\n\"A=B\" = \"1\"\n",
        3,
        1,
        "a variable name in [env] set: `A=B` contains `=`",
    );
    assert_invalid(
        "[env]\nset = { \"A\\u0000\" = \"1\" }\n",
        2,
        9,
        "a variable name in [env] set: `A\\0` contains a NUL character",
    );
    assert_invalid(
        "[env]\nset = { A = \"x\\u0000y\" }\n",
        2,
        13,
        "the value of `A` in [env] set contains a NUL character",
    );
}

#[test]
fn loader_variables_may_be_set_because_they_only_affect_the_sandbox() {
    let p = parse(
        "[env.set]\nLD_PRELOAD = \"/opt/x.so\"\nLD_LIBRARY_PATH = \"/opt\"\nLD_AUDIT = \"\"\n",
    )
    .unwrap();
    assert_eq!(p.env.set.len(), 3);
    assert_eq!(p.env.set["LD_AUDIT"], "");
}

#[test]
fn columns_count_characters_and_ignore_crlf() {
    assert_invalid(
        "# привет\r\n[env]\r\nset = { \"é\" = 1 }\r\n",
        3,
        15,
        "the value of `é` in [env] set must be a string, not an integer",
    );
}

mod ask;
mod limits;
