//! A test's own CA and a server certificate it signed, made with openssl in a directory outside
//! the workspace, for the HTTPS servers a test reaches through airlock's injector.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{stderr, World};

/// openssl's arguments for a new P-256 key, unencrypted.
pub const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// `openssl ARGS` in `dir`; it must succeed.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
}

/// `outside/pki/`: a CA (`ca.pem`, `ca.key`) and a certificate it signed (`cert.pem`,
/// `key.pem`) with the common name `cn` and the DNS names `names`.
pub fn ca_and_server(w: &World, cn: &str, names: &[&str]) -> PathBuf {
    let dir = w.outside.join("pki");
    std::fs::create_dir_all(&dir).unwrap();
    openssl(
        &dir,
        &[
            &["req", "-x509", "-days", "2", "-subj", "/CN=airlock test CA"][..],
            &EC,
            &["-keyout", "ca.key", "-out", "ca.pem"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    let san: Vec<String> = names.iter().map(|name| format!("DNS:{name}")).collect();
    let san = format!("subjectAltName={}", san.join(","));
    let subject = format!("/CN={cn}");
    openssl(
        &dir,
        &[
            &[
                "req", "-subj", &subject, "-keyout", "key.pem", "-out", "req.csr",
            ][..],
            &EC,
            &["-addext", &san],
        ]
        .concat(),
    );
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "req.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-copy_extensions",
            "copy",
            "-out",
            "cert.pem",
        ],
    );
    give_all(w, &dir);
    dir
}

/// Hand `dir` and what is in it to the identity under test.
pub fn give_all(w: &World, dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        w.give(&entry.unwrap().path());
    }
    w.give(dir);
}
