//! `airlock k8s render` through the binary: a profile of the user's own becomes the ConfigMap's
//! file byte for byte and the pod's arguments, YAML and JSON agree on what they hold, and a
//! limit no pod can keep is refused with exit 125 and what to do. The manifests against the
//! cluster's schemas, with a real validator: scripts/test-k8s-render.sh.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::{stderr, stdout, Mode, World};

fn render(w: &World, args: &[&str]) -> std::process::Output {
    w.airlock()
        .args(["k8s", "render"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_profile_becomes_the_pods_configmap_and_arguments() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let text = "# the pod's profile\n[network]\nallow = [\"github.com:443\"]\n\n[limits]\nmemory = \"1GiB\"\n";
    w.named_profile("agent", text);
    let out = render(&w, &["agent", "--namespace", "agents", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let objects: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let config_map = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(config_map["data"]["agent.toml"], text);
    // The pods' audit records leave them on stdout, where the cluster's collector reads them.
    let config = objects
        .iter()
        .find(|o| o["metadata"]["name"] == "airlock-agent-config")
        .unwrap();
    assert!(config["data"]["config.toml"]
        .as_str()
        .unwrap()
        .contains("export = [\"stdout\"]"));
    let template = objects
        .iter()
        .find(|o| o["kind"] == "SandboxTemplate")
        .unwrap();
    let args = template["spec"]["podTemplate"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("\"--profile\",\"agent\"") && args.contains("*.agents.svc.cluster.local"),
        "{args}"
    );
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .unwrap();
    assert_eq!(policy["spec"]["egress"][1]["ports"][0]["port"], 443);

    let yaml = render(&w, &["agent", "--namespace", "agents"]);
    assert!(yaml.status.success(), "{}", stderr(&yaml));
    let yaml = stdout(&yaml);
    assert_eq!(
        yaml.matches("\n---\n").count() + usize::from(yaml.starts_with("---\n")),
        objects.len(),
        "{yaml}"
    );
    assert!(
        yaml.contains("  agent.toml: |2\n    # the pod's profile\n"),
        "{yaml}"
    );
}

#[test]
fn a_limit_no_pod_keeps_is_refused_with_what_to_do() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    w.named_profile("busy", "[limits]\ncpus = 2\n");
    let out = render(&w, &["busy"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("[limits] cpus") && said.contains("take cpus out of the profile"),
        "{said}"
    );
    assert!(stdout(&out).is_empty(), "nothing half-written on stdout");

    let out = render(&w, &["busy", "--name", "Not_A_Name"]);
    assert_eq!(out.status.code(), Some(125));
}
