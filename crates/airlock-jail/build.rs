//! Compiles airlock's seccomp filters to BPF at build time, so that no launch pays for it
//! (peers that build a libseccomp filter per launch spend ~11 ms there).
//!
//! One program is emitted into `$OUT_DIR/seccomp_filters.rs` as `FILTER`, made of two parts:
//! - first, syscall numbers newer than this list (and x32's) and `clone3` answer ENOSYS. `clone3`
//!   passes its flags in memory that BPF cannot read, so we make libc fall back to `clone`, whose
//!   flags we can check;
//! - then the escape and kernel-attack surface answers EPERM; a foreign architecture kills the
//!   process (seccompiler's arch check).
//!
//! The policy is a deny list over an allow-by-default base: the sandbox must run arbitrary
//! build tools, and the namespaces, Landlock and capabilities already confine what is allowed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

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
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

/// ioctls that push input into a terminal (TIOCSTI) or drive the console (TIOCLINUX).
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI, 0x541C /* TIOCLINUX */];

/// Socket families the sandbox may create; everything else (netlink, packet, vsock, …) is refused.
const ALLOWED_SOCKET_FAMILIES: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
];

fn condition(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, len, op, value).expect("valid seccomp condition")
}

fn target_arch() -> TargetArch {
    match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => TargetArch::x86_64,
        Ok("aarch64") => TargetArch::aarch64,
        other => panic!("airlock-jail supports x86_64 and aarch64 only, not {other:?}"),
    }
}

fn eperm_filter(arch: TargetArch) -> BpfProgram {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, vec![]);
    }
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            SeccompRule::new(vec![condition(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(*flag),
                *flag,
            )])
            .expect("valid rule")
        })
        .collect();
    rules.insert(libc::SYS_clone, clone_rules);
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|request| {
            SeccompRule::new(vec![condition(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                *request,
            )])
            .expect("valid rule")
        })
        .collect();
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let family_not_allowed = ALLOWED_SOCKET_FAMILIES
        .iter()
        .map(|family| condition(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *family))
        .collect();
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(family_not_allowed).expect("valid rule")],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .expect("valid filter");
    filter.try_into().expect("filter compiles")
}

fn enosys_filter(arch: TargetArch) -> BpfProgram {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3, vec![]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .expect("valid filter");
    let body: BpfProgram = filter.try_into().expect("filter compiles");
    // A deny list only knows the syscalls that existed when it was written. Numbers above the
    // newest one airlock knows (and x32's, which carry bit 30) answer ENOSYS, as on an older
    // kernel, before the list is consulted: a new kernel's new syscalls stay closed until
    // reviewed.
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD|BPF_W|BPF_ABS
    const BPF_JMP_JGT_K: u16 = 0x25; // BPF_JMP|BPF_JGT|BPF_K
    const BPF_RET_K: u16 = 0x06; // BPF_RET|BPF_K
    let prefix = vec![
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        }, // seccomp_data.nr
        sock_filter {
            code: BPF_JMP_JGT_K,
            jt: 0,
            jf: 1,
            k: NEWEST_KNOWN_SYSCALL,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
    ];
    prefix.into_iter().chain(body).collect()
}

/// Chain two programs into one: every "allow" of `first` continues into `second` instead. One
/// filter costs the kernel one JIT image per launch instead of two.
fn chain(first: BpfProgram, second: BpfProgram) -> BpfProgram {
    const BPF_RET_K: u16 = 0x06;
    const BPF_JMP_JA: u16 = 0x05;
    let len = first.len();
    let mut out: BpfProgram = first
        .into_iter()
        .enumerate()
        .map(|(i, insn)| {
            if insn.code == BPF_RET_K && insn.k == libc::SECCOMP_RET_ALLOW {
                // A jump lands `k` instructions after the next one: on the first of `second`.
                sock_filter {
                    code: BPF_JMP_JA,
                    jt: 0,
                    jf: 0,
                    k: (len - i - 1) as u32,
                }
            } else {
                insn
            }
        })
        .collect();
    out.extend(second);
    out
}

fn render(name: &str, program: &BpfProgram, out: &mut String) {
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
    let arch = target_arch();
    let mut out =
        String::from("// Generated by build.rs from the deny lists there. Do not edit.\n");
    render(
        "FILTER",
        &chain(enosys_filter(arch), eperm_filter(arch)),
        &mut out,
    );
    let path = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("seccomp_filters.rs");
    std::fs::write(path, out).unwrap();
}
