//! What a sandbox runs, and how it travels to the setup process when it is given at START
//! rather than with the spec: a sandbox prepared before its command was known (a warm sandbox of
//! `airlock serve`, see [`crate::prepare_without_command`]) gets it in a memfd sent with START.

use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use crate::error::{JailError, Result, SyscallContext, UNEXPECTED};
use crate::spec::SandboxSpec;

/// The command, its complete environment (nothing else is inherited) and its working directory
/// inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// argv[0] is looked up in the sandbox's PATH.
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
}

/// The most bytes an encoded command may take. Far above what a kernel lets one exec carry
/// (ARG_MAX is a quarter of the stack limit, 2 MiB by default): a bound on what the setup process
/// reads, not a limit callers meet.
const MAX_ENCODED_BYTES: u64 = 64 << 20;

impl Command {
    /// The command a spec names.
    pub fn of(spec: &SandboxSpec) -> Command {
        Command {
            argv: spec.argv.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
        }
    }

    /// In a memfd, ready to be read from its start: what START carries.
    pub(crate) fn to_memfd(&self) -> Result<OwnedFd> {
        let fd = nix::sys::memfd::memfd_create(
            c"airlock-command",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .during(
            "create a memfd for the command",
            "kernel >= 3.17 is required",
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&self.encode())
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| JailError::Syscall {
                action: "write the command for the sandbox",
                errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                hint: "is memory short?",
            })?;
        Ok(OwnedFd::from(file))
    }

    /// Read back what [`Command::to_memfd`] wrote (the setup process, at START).
    pub(crate) fn from_memfd(fd: OwnedFd) -> Result<Command> {
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_ENCODED_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| JailError::Syscall {
                action: "read the command from the supervisor",
                errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                hint: UNEXPECTED,
            })?;
        if bytes.len() as u64 > MAX_ENCODED_BYTES {
            return Err(JailError::MalformedCommand("larger than 64 MiB"));
        }
        Command::decode(&bytes)
    }

    /// Each string as its length (u32, little-endian) and its bytes: the arguments' count and
    /// the arguments, the variables' count and each name and value, the working directory.
    /// Public for the fuzz target (`fuzz/fuzz_targets/start_command.rs`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        put(&(self.argv.len() as u32).to_le_bytes());
        for arg in &self.argv {
            put(arg.as_bytes());
        }
        put(&(self.env.len() as u32).to_le_bytes());
        for (name, value) in &self.env {
            put(name.as_bytes());
            put(value.as_bytes());
        }
        put(self.cwd.as_os_str().as_bytes());
        out
    }

    /// What [`Command::encode`] wrote, or why these bytes are not that; never reads past them.
    pub fn decode(bytes: &[u8]) -> Result<Command> {
        let mut reader = Reader { rest: bytes };
        let argc = reader.count()?;
        let mut argv = Vec::new();
        for _ in 0..argc {
            argv.push(reader.string()?);
        }
        let envc = reader.count()?;
        let mut env = Vec::new();
        for _ in 0..envc {
            env.push((reader.string()?, reader.string()?));
        }
        let cwd = PathBuf::from(reader.string()?);
        if !reader.rest.is_empty() {
            return Err(JailError::MalformedCommand("bytes after its end"));
        }
        Ok(Command { argv, env, cwd })
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl Reader<'_> {
    fn field(&mut self) -> Result<&[u8]> {
        let (len, rest) = self
            .rest
            .split_first_chunk::<4>()
            .ok_or(JailError::MalformedCommand("cut short"))?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(JailError::MalformedCommand("cut short"));
        }
        let (field, rest) = rest.split_at(len);
        self.rest = rest;
        Ok(field)
    }

    fn string(&mut self) -> Result<OsString> {
        Ok(OsString::from_vec(self.field()?.to_vec()))
    }

    /// A count, which can be no more than the bytes left could hold (4 bytes at least each).
    fn count(&mut self) -> Result<usize> {
        let field = self.field()?;
        let count = <[u8; 4]>::try_from(field)
            .map(u32::from_le_bytes)
            .map_err(|_| JailError::MalformedCommand("a count is not 4 bytes"))?;
        let count = count as usize;
        if count > self.rest.len() / 4 {
            return Err(JailError::MalformedCommand("a count past its end"));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Command {
            argv: vec![
                "sh".into(),
                "-c".into(),
                OsString::from_vec(vec![0xff, b'x']),
            ],
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("EMPTY".into(), "".into()),
            ],
            cwd: "/work/space".into(),
        }
    }

    #[test]
    fn a_command_comes_back_as_it_went_through_a_memfd() {
        let fd = command().to_memfd().unwrap();
        assert_eq!(Command::from_memfd(fd).unwrap(), command());
    }

    #[test]
    fn an_empty_command_round_trips() {
        let empty = Command {
            argv: vec![],
            env: vec![],
            cwd: PathBuf::new(),
        };
        assert_eq!(Command::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_cut_or_extended_encoding_is_refused() {
        let bytes = command().encode();
        for end in 0..bytes.len() {
            assert!(Command::decode(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Command::decode(&longer).is_err());
    }

    #[test]
    fn a_huge_count_is_refused_before_anything_is_allocated() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&4u32.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Command::decode(&bytes),
            Err(JailError::MalformedCommand("a count past its end"))
        ));
    }
}
