//! Compiles airlock's seccomp filter to classic BPF at build time, so that no launch pays for
//! building it (peers that build a libseccomp filter per launch spend ~11 ms there).
//!
//! One program is emitted into `$OUT_DIR/seccomp_filters.rs` as `FILTER`:
//! 1. a foreign architecture kills the process;
//! 2. syscall numbers newer than this list (and x32's) and `clone3` answer ENOSYS. `clone3`
//!    passes its flags in memory that BPF cannot read, so we make libc fall back to `clone`, whose
//!    flags we can check;
//! 3. the escape and kernel-attack surface answers EPERM: a list of syscalls, `clone` with any
//!    namespace flag, two terminal ioctls, sockets of families other than unix/inet/inet6;
//!    `fallocate` that takes space answers EOPNOTSUPP (see [`ALLOWED_FALLOCATE_MODES`]);
//! 4. everything else is allowed.
//!
//! The policy is a deny list over an allow-by-default base: the sandbox must run arbitrary
//! build tools, and the namespaces, Landlock and capabilities already confine what is allowed.
//!
//! Why assembled here rather than with `seccompiler`: the kernel checks, converts and JIT-compiles
//! the program on every launch, at about 1 µs per instruction (measured on the development
//! machine: a 4-instruction filter loads in 33 µs, a 362-instruction one in 386 µs). seccompiler
//! spends 4 to 6 instructions per rule, 371 for this policy; one compare per denied syscall, all
//! jumping to one shared return, needs about a quarter of that (75), and a range check for each
//! run of three or more consecutive numbers (mount..reboot, io_uring..fspick, …) brings it to 58.
//! The decisions are checked by the BPF interpreter in `confine.rs`'s tests, for every number.
// A build script fails by panicking: cargo shows the message and stops the build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

/// Syscalls refused outright: mounts, namespaces, debugging other processes, kernel attack
/// surface (bpf, perf, io_uring, userfaultfd, keys), and machine administration.
const DENIED: &[(&str, libc::c_long)] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("syslog", libc::SYS_syslog),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("vhangup", libc::SYS_vhangup),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("open_tree_attr", 467),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
];

/// The newest syscall number reviewed for this list (file_setattr, Linux 6.17; x86_64 and
/// aarch64 share these numbers).
const NEWEST_KNOWN_SYSCALL: u32 = 469;

/// Namespace flags of clone(2): creating any namespace is refused.
const CLONE_NAMESPACE_FLAGS: &[u32] = &[
    libc::CLONE_NEWNS as u32,
    libc::CLONE_NEWCGROUP as u32,
    libc::CLONE_NEWUTS as u32,
    libc::CLONE_NEWIPC as u32,
    libc::CLONE_NEWUSER as u32,
    libc::CLONE_NEWPID as u32,
    libc::CLONE_NEWNET as u32,
    0x80, // CLONE_NEWTIME
];

/// ioctls that push input into a terminal (TIOCSTI) or drive the console (TIOCLINUX).
const DENIED_IOCTLS: &[u32] = &[libc::TIOCSTI as u32, 0x541C /* TIOCLINUX */];

/// Socket families the sandbox may create; everything else (netlink, packet, vsock, …) is refused.
const ALLOWED_SOCKET_FAMILIES: &[u32] = &[
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
];

/// `fallocate` modes the sandbox may use: only punching a hole, which frees space. Every other
/// mode takes disk in one call at metadata speed (gigabytes in a millisecond), faster than the
/// supervisor's watch on free space can look, and `FALLOC_FL_KEEP_SIZE` (or `INSERT_RANGE`)
/// past RLIMIT_FSIZE too, which bounds a file's size, not its blocks. EOPNOTSUPP is what a
/// filesystem without fallocate answers: glibc's posix_fallocate then writes the blocks, at the
/// speed the watch is made for.
const ALLOWED_FALLOCATE_MODES: &[u32] = &[
    0x01 | 0x02, // FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
];

/// Offsets into `struct seccomp_data`. Arguments are 64-bit, but every argument checked here is
/// read by the kernel as 32 bits (clone's flags go through `lower_32_bits`, ioctl's request is an
/// `unsigned int`, socket's family an `int`), so the low word alone decides and junk in the high
/// word cannot slip past (fallocate's mode is an `int` too). The low word comes first on the
/// little-endian targets we build for.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0_LOW: u32 = 16;
const OFFSET_ARG1_LOW: u32 = 24;

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGT_K: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// Places a jump can go; each is defined once in the program by `Insn::Label`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Notify,
    ArchChecked,
    CheckClone,
    CheckIoctl,
    CheckSocket,
    CheckFallocate,
    Allow,
    Eperm,
    Enosys,
}

/// Where a conditional jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    /// Over the next instruction.
    SkipOne,
    Label(Label),
}

enum Insn {
    /// Load a word of `seccomp_data` into the accumulator.
    Load(u32),
    Jump {
        code: u16,
        k: u32,
        taken: To,
        not_taken: To,
    },
    Return(u32),
    Label(Label),
}

/// `if acc == k goto target`, else fall through.
fn jump_if_equal(k: u32, target: Label) -> Insn {
    Insn::Jump {
        code: BPF_JEQ_K,
        k,
        taken: To::Label(target),
        not_taken: To::Next,
    }
}

fn number(syscall: libc::c_long) -> u32 {
    u32::try_from(syscall).expect("syscall numbers are small and positive")
}

/// The numbers of the syscalls in [`DENIED`], sorted, each once.
fn denied_numbers() -> Vec<u32> {
    let mut denied: Vec<u32> = DENIED.iter().map(|(_, nr)| number(*nr)).collect();
    denied.sort_unstable();
    denied.dedup();
    denied
}

/// Sorted numbers as runs of consecutive ones, (first, last) each: the kernel verifies and
/// compiles every instruction on each launch (~1 µs each here), and a run of three or more costs
/// two instructions instead of one per number.
fn runs(sorted: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &nr in sorted {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == nr => *last = nr,
            _ => runs.push((nr, nr)),
        }
    }
    runs
}

/// The policy; `gated`: every `connect` goes to the supervisor, which answers for the kernel
/// (the network gate).
fn policy(gated: bool) -> Vec<Insn> {
    let audit_arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => 0xC000_003E,  // AUDIT_ARCH_X86_64
        Ok("aarch64") => 0xC000_00B7, // AUDIT_ARCH_AARCH64
        other => panic!("airlock-jail supports x86_64 and aarch64 only, not {other:?}"),
    };
    assert_eq!(
        std::env::var("CARGO_CFG_TARGET_ENDIAN").as_deref(),
        Ok("little"),
        "the argument offsets assume a little-endian target"
    );
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | e as u32;
    let namespace_flags = CLONE_NAMESPACE_FLAGS.iter().fold(0, |all, flag| all | flag);

    let mut program = vec![
        Insn::Load(OFFSET_ARCH),
        jump_if_equal(audit_arch, Label::ArchChecked),
        Insn::Return(libc::SECCOMP_RET_KILL_PROCESS),
        Insn::Label(Label::ArchChecked),
        Insn::Load(OFFSET_NR),
        Insn::Jump {
            code: BPF_JGT_K,
            k: NEWEST_KNOWN_SYSCALL,
            taken: To::Label(Label::Enosys),
            not_taken: To::Next,
        },
        jump_if_equal(number(libc::SYS_clone3), Label::Enosys),
    ];
    if gated {
        program.push(jump_if_equal(number(libc::SYS_connect), Label::Notify));
    }
    for (first, last) in runs(&denied_numbers()) {
        if last - first < 2 {
            program.extend((first..=last).map(|nr| jump_if_equal(nr, Label::Eperm)));
        } else {
            // A run of three or more numbers in two instructions: first <= nr <= last.
            program.extend([
                Insn::Jump {
                    code: BPF_JGE_K,
                    k: first,
                    taken: To::Next,
                    not_taken: To::SkipOne,
                },
                Insn::Jump {
                    code: BPF_JGT_K,
                    k: last,
                    taken: To::Next,
                    not_taken: To::Label(Label::Eperm),
                },
            ]);
        }
    }
    program.extend([
        jump_if_equal(number(libc::SYS_clone), Label::CheckClone),
        jump_if_equal(number(libc::SYS_ioctl), Label::CheckIoctl),
        jump_if_equal(number(libc::SYS_socket), Label::CheckSocket),
        jump_if_equal(number(libc::SYS_fallocate), Label::CheckFallocate),
        Insn::Return(libc::SECCOMP_RET_ALLOW),
        // clone: any namespace flag is refused.
        Insn::Label(Label::CheckClone),
        Insn::Load(OFFSET_ARG0_LOW),
        Insn::Jump {
            code: BPF_JSET_K,
            k: namespace_flags,
            taken: To::Label(Label::Eperm),
            not_taken: To::Label(Label::Allow),
        },
        // ioctl: the requests that push input into a terminal or drive the console.
        Insn::Label(Label::CheckIoctl),
        Insn::Load(OFFSET_ARG1_LOW),
    ]);
    program.extend(
        DENIED_IOCTLS
            .iter()
            .map(|request| jump_if_equal(*request, Label::Eperm)),
    );
    program.extend([
        Insn::Return(libc::SECCOMP_RET_ALLOW),
        // socket: only the allowed families.
        Insn::Label(Label::CheckSocket),
        Insn::Load(OFFSET_ARG0_LOW),
    ]);
    program.extend(
        ALLOWED_SOCKET_FAMILIES
            .iter()
            .map(|family| jump_if_equal(*family, Label::Allow)),
    );
    program.extend([
        Insn::Return(errno(libc::EPERM)),
        // fallocate: only the modes that free space.
        Insn::Label(Label::CheckFallocate),
        Insn::Load(OFFSET_ARG1_LOW),
    ]);
    program.extend(
        ALLOWED_FALLOCATE_MODES
            .iter()
            .map(|mode| jump_if_equal(*mode, Label::Allow)),
    );
    program.extend([
        Insn::Return(errno(libc::EOPNOTSUPP)),
        Insn::Label(Label::Eperm),
        Insn::Return(errno(libc::EPERM)),
        Insn::Label(Label::Allow),
        Insn::Return(libc::SECCOMP_RET_ALLOW),
        Insn::Label(Label::Enosys),
        Insn::Return(errno(libc::ENOSYS)),
    ]);
    if gated {
        program.extend([
            Insn::Label(Label::Notify),
            Insn::Return(libc::SECCOMP_RET_USER_NOTIF),
        ]);
    }
    program
}

/// Resolve labels into the relative offsets of classic BPF (forward only, at most 255 ahead).
fn assemble(program: &[Insn]) -> Vec<libc::sock_filter> {
    let mut positions = Vec::new();
    let mut index = 0usize;
    for insn in program {
        match insn {
            Insn::Label(label) => {
                assert!(
                    !positions.iter().any(|(l, _)| l == label),
                    "label {label:?} defined twice"
                );
                positions.push((*label, index));
            }
            _ => index += 1,
        }
    }
    let position = |label: Label| {
        positions
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, at)| *at)
            .unwrap_or_else(|| panic!("label {label:?} is never defined"))
    };
    let mut out = Vec::new();
    for insn in program {
        let at = out.len();
        let offset = |to: To| -> u8 {
            match to {
                To::Next => 0,
                To::SkipOne => 1,
                To::Label(label) => {
                    let target = position(label);
                    assert!(target > at, "jump to {label:?} goes backwards");
                    u8::try_from(target - at - 1)
                        .unwrap_or_else(|_| panic!("jump to {label:?} is too far for classic BPF"))
                }
            }
        };
        let encoded = match insn {
            Insn::Label(_) => continue,
            Insn::Load(offset) => (BPF_LD_W_ABS, 0, 0, *offset),
            Insn::Jump {
                code,
                k,
                taken,
                not_taken,
            } => (*code, offset(*taken), offset(*not_taken), *k),
            Insn::Return(value) => (BPF_RET_K, 0, 0, *value),
        };
        out.push(libc::sock_filter {
            code: encoded.0,
            jt: encoded.1,
            jf: encoded.2,
            k: encoded.3,
        });
    }
    out
}

fn render(name: &str, program: &[libc::sock_filter], out: &mut String) {
    writeln!(out, "pub(crate) static {name}: &[libc::sock_filter] = &[").unwrap();
    for insn in program {
        writeln!(
            out,
            "    libc::sock_filter {{ code: {:#06x}, jt: {}, jf: {}, k: {:#010x} }},",
            insn.code, insn.jt, insn.jf, insn.k
        )
        .unwrap();
    }
    writeln!(out, "];").unwrap();
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let mut out =
        String::from("// Generated by build.rs from the deny lists there. Do not edit.\n");
    render("FILTER", &assemble(&policy(false)), &mut out);
    render("FILTER_GATED", &assemble(&policy(true)), &mut out);
    // For the tests, which check the filters' decision for every syscall number against it.
    writeln!(
        out,
        "#[cfg(test)]\npub(crate) static DENIED_NUMBERS: &[u32] = &{:?};\n\
         #[cfg(test)]\npub(crate) const NEWEST_KNOWN_SYSCALL: u32 = {NEWEST_KNOWN_SYSCALL};",
        denied_numbers()
    )
    .unwrap();
    let path = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("seccomp_filters.rs");
    std::fs::write(path, out).unwrap();
}
