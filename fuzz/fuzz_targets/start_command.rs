//! The command a warm sandbox is given at START (`airlock_jail::Command`, read by its setup
//! process from a memfd): any bytes are read or refused without a panic, an allocation they do
//! not account for, or a read past them; and every command made of the input's pieces is read
//! back as it was written.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use airlock_jail::Command;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Command::decode(data);
    // The writer's side: arguments, variables and a directory cut from the input at its zeros.
    let mut pieces = data
        .split(|b| *b == 0)
        .map(|p| OsString::from_vec(p.to_vec()));
    let cwd = pieces.next().unwrap_or_default();
    let rest: Vec<OsString> = pieces.collect();
    let (argv, env) = rest.split_at(rest.len() / 2);
    let command = Command {
        argv: argv.to_vec(),
        env: env
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair.get(1).cloned().unwrap_or_default()))
            .collect(),
        cwd: cwd.into(),
    };
    let read = Command::decode(&command.encode()).expect("what encode wrote is read back");
    assert_eq!(read, command);
});
