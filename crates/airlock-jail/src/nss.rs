//! Name lookups of a statically linked airlock.
//!
//! glibc looks up users and host names through NSS, whose services /etc/nsswitch.conf names. In a
//! statically linked program, "files" and "dns" are built in, but any other service (systemd,
//! resolve, mdns, sss, ldap) is a shared library that glibc loads with its own dynamic loader,
//! beside the static copy of libc, and some of them crash there: with `passwd: files systemd`, a
//! lookup of an unknown uid died in libnss_systemd.so.2. So the static build uses the built-in
//! services only, and never loads a library at run time.

use std::ffi::{c_char, c_int, CStr};

extern "C" {
    /// glibc's `<nss.h>`: use `service_line` (nsswitch.conf syntax) for `db`, ignoring the file.
    fn __nss_configure_lookup(db: *const c_char, service_line: *const c_char) -> c_int;
}

/// Resolve users and groups through /etc/passwd and /etc/group only, and host names through
/// /etc/hosts and the DNS servers of /etc/resolv.conf only (systemd-resolved's stub, when it
/// runs, is one). Call first thing in `main`, before any lookup and any thread.
pub fn use_built_in_services_only() {
    let settings: [(&CStr, &CStr); 4] = [
        (c"passwd", c"files"),
        (c"group", c"files"),
        (c"shadow", c"files"),
        (c"hosts", c"files dns"),
    ];
    for (db, services) in settings {
        // SAFETY: both are NUL-terminated strings that outlive the call; glibc copies what it
        // keeps. Called while the process is single-threaded, before any lookup.
        unsafe { __nss_configure_lookup(db.as_ptr(), services.as_ptr()) };
    }
}
