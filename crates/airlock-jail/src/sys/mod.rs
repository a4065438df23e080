//! The raw system calls that neither nix nor landlock wrap, in files by job. Every `unsafe`
//! block of airlock lives in this crate, and most of them here.

mod confine;
mod loopdev;
mod mount;
mod network;
mod process;
mod seccomp;

pub(crate) use confine::{
    close_fds_from_except, close_stdio, drop_all_capabilities, drop_groups, landlock_abi_version,
    set_gids, set_uids,
};
pub(crate) use loopdev::attach_autoclear;
pub(crate) use mount::{
    idmap_mount, mount_setattr, move_mount_onto, move_mount_to, open_tree_clone, restrict_tree,
    MountAttrs,
};
pub(crate) use network::{start_new_network, NewNetwork};
pub(crate) use process::{
    clone_fork, clone_idle, default_sigchld, keep_here, pidfd_getfd, pidfd_open,
    spawn_in_new_session, steer_away, wait_for_signal, Forked, VmChild,
};
pub(crate) use seccomp::{
    install_seccomp, install_seccomp_listener, notif_id_valid, notif_recv, notif_send,
    seccomp_notify_supported,
};
