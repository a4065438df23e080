//! The starter profiles shipped with airlock, through the binary: listed with where each comes
//! from, usable by name, hidden by a file of the same name, copied with `policy show --starter`,
//! and enforced (a host the starter does not name is refused). Offline: the tools themselves,
//! against their registries, are scripts/test-starters.sh's.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::{ran, stderr, stdout, Mode, World};

const STARTERS: [&str; 6] = ["apt", "cargo", "github", "go", "npm", "pip"];

fn shipped(name: &str) -> String {
    let path = format!(
        "{}/../../packaging/profiles/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

fn listed(w: &World) -> Vec<Value> {
    let out = w
        .airlock()
        .args(["policy", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

both_modes!(
    starters_are_listed_usable_by_name_and_hidden_by_a_file,
    |w: &World| {
        for name in STARTERS {
            let entry = listed(w)
                .into_iter()
                .find(|p| p["name"] == name && p["kind"] == "starter")
                .unwrap_or_else(|| panic!("{name} is not listed"));
            assert_eq!(entry["used"], true, "{entry}");
            assert!(entry["about"].as_str().unwrap().len() > 10, "{entry}");
            // Copied as shipped, comments and all.
            let out = w
                .airlock()
                .args(["policy", "show", name, "--starter"])
                .output()
                .unwrap();
            assert_eq!(stdout(&out), shipped(name));
        }
        let out = w
            .airlock()
            .args(["policy", "show", "pip"])
            .output()
            .unwrap();
        let text = stdout(&out);
        assert!(
            text.starts_with("# profile pip, a starter shipped with airlock"),
            "{text}"
        );
        assert!(
            text.contains("allow = [\"pypi.org:443\", \"files.pythonhosted.org:443\"]"),
            "{text}"
        );

        // Enforced: a name the starter does not allow gets no answer, and the run's intent names
        // the starter's text by its digest (a copy of it would have the same).
        let out = w.inside_with(
            &["-p", "pip"],
            "getent hosts example.org || echo 'not resolved'",
        );
        assert!(ran(&out).contains("not resolved"), "{}", stderr(&out));
        assert!(
            stderr(&out)
                .contains("refused example.org (1×) — profile 'pip' has no [network] allow entry"),
            "{}",
            stderr(&out)
        );
        let out = w
            .airlock()
            .args([
                "log",
                "--json",
                "--action",
                "run.intent",
                "--profile",
                "pip",
            ])
            .output()
            .unwrap();
        let intent: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
        let digest = std::process::Command::new("sha256sum")
            .arg(format!(
                "{}/../../packaging/profiles/pip.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .output()
            .unwrap();
        let digest = stdout(&digest);
        assert_eq!(intent["policy"].as_str(), digest.split(' ').next());

        // A file of the same name wins, and the starter is listed as hidden.
        w.named_profile("pip", "network = \"none\"\n");
        let pips: Vec<Value> = listed(w)
            .into_iter()
            .filter(|p| p["name"] == "pip")
            .collect();
        assert_eq!(pips.len(), 2, "{pips:?}");
        assert_eq!(
            (&pips[0]["kind"], &pips[0]["used"]),
            (&"file".into(), &true.into())
        );
        assert_eq!(
            (&pips[1]["kind"], &pips[1]["used"]),
            (&"starter".into(), &false.into())
        );
        let out = w
            .airlock()
            .args(["policy", "show", "pip"])
            .output()
            .unwrap();
        assert!(
            stdout(&out).contains("network = \"none\""),
            "{}",
            stdout(&out)
        );
        let out = w.airlock().args(["policy", "list"]).output().unwrap();
        assert!(
            stdout(&out).contains("(hidden by the one above)"),
            "{}",
            stdout(&out)
        );
        // ...and --starter still prints the starter, whatever file hides it.
        let out = w
            .airlock()
            .args(["policy", "show", "pip", "--starter"])
            .output()
            .unwrap();
        assert_eq!(stdout(&out), shipped("pip"));
        let out = w
            .airlock()
            .args(["policy", "show", "nope", "--starter"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(
            stderr(&out).contains("no starter profile `nope`"),
            "{}",
            stderr(&out)
        );
    }
);
