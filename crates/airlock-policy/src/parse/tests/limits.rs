//! `[limits]`: cpus, ranges, disk and files.

use super::*;

#[test]
fn cpus_take_a_float_or_a_whole_number() {
    assert_eq!(
        parse("[limits]\ncpus = 2\n").unwrap().limits.millicpus,
        Some(2000)
    );
    assert_eq!(
        parse("[limits]\ncpus = 0.25\n").unwrap().limits.millicpus,
        Some(250)
    );
    assert_eq!(
        parse("[limits]\ncpus = 1_0.5\n").unwrap().limits.millicpus,
        Some(10_500)
    );
    assert_eq!(parse("").unwrap().limits.millicpus, None);
}

#[test]
fn limits_out_of_range_name_the_line_and_what_to_do() {
    for (text, what) in [
        ("[limits]\ncpus = 0\n", "must be between 0.01 and 4096"),
        ("[limits]\ncpus = -1.0\n", "must be between 0.01 and 4096"),
        ("[limits]\ncpus = nan\n", "must be between 0.01 and 4096"),
        ("[limits]\ncpus = 5000\n", "must be between 0.01 and 4096"),
        ("[limits]\ncpus = \"2\"\n", "a number of CPUs"),
        ("[limits]\ndisk = \"1MiB\"\n", "below the minimum of 4MiB"),
        ("[limits]\nfiles = 10\n", "below the minimum of 64"),
        ("[limits]\nfiles = \"many\"\n", "a whole number"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{ORIGIN}:2:")), "{text}: {err}");
        assert!(err.contains(what), "{text}: {err}");
    }
}

#[test]
fn disk_and_files_parse() {
    let p = parse("[limits]\ndisk = \"8MiB\"\nfiles = 1000\n").unwrap();
    assert_eq!(p.limits.disk_bytes, Some(8 << 20));
    assert_eq!(p.limits.files, Some(1000));
}
