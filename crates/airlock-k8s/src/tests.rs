use std::path::Path;

use super::*;

fn profile(text: &str) -> Profile {
    airlock_policy::parse_profile(text, "agent", Path::new("/etc/airlock/profiles/agent.toml"))
        .unwrap()
}

fn request<'a>(profile: &'a Profile, text: &'a str) -> RenderRequest<'a> {
    RenderRequest {
        profile,
        profile_text: text,
        config_text: "[audit]\nexport = [\"stdout\"]\n",
        image: "registry.example/airlock:0.1.0".into(),
        namespace: "agents".into(),
        name: "airlock-agent".into(),
        pool_size: 2,
        cluster_domain: "cluster.local".into(),
        router: RouterPods {
            namespace: "agent-sandbox-system".into(),
            labels: vec![("app.kubernetes.io/name".into(), "sandbox-router".into())],
        },
        client_namespaces: Vec::new(),
        excluded_cidrs: Vec::new(),
    }
}

fn kind<'a>(rendered: &'a Rendered, kind: &str) -> &'a Value {
    rendered
        .objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn the_objects_and_what_binds_them() {
    let text = "[limits]\nmemory = \"1GiB\"\ntmp_size = \"512MiB\"\n";
    let profile = profile(text);
    let rendered = render(&request(&profile, text)).unwrap();
    let kinds: Vec<&str> = rendered
        .objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "ConfigMap",
            "SandboxTemplate",
            "SandboxWarmPool",
            "NetworkPolicy"
        ]
    );
    assert_eq!(
        rendered.objects[1]["data"]["config.toml"],
        "[audit]\nexport = [\"stdout\"]\n"
    );
    assert_eq!(kind(&rendered, "ConfigMap")["data"]["agent.toml"], text);
    let pool = kind(&rendered, "SandboxWarmPool");
    assert_eq!(
        pool["spec"],
        json!({"replicas": 2, "sandboxTemplateRef": {"name": "airlock-agent"}})
    );

    let template = kind(&rendered, "SandboxTemplate");
    assert_eq!(template["spec"]["networkPolicyManagement"], "Unmanaged");
    let pod = &template["spec"]["podTemplate"]["spec"];
    assert_eq!(pod["hostUsers"], false);
    assert_eq!(pod["securityContext"]["runAsUser"], IMAGE_UID);
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let after = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
    assert_eq!(after("--profile"), "agent");
    assert_eq!(after("--host-name"), "*.agents.svc.cluster.local");
    assert_eq!(after("--tokens-file"), "/etc/airlock/tokens/tokens.json");
    assert_eq!(after("--config"), "/etc/airlock/config/config.toml");
    // 1 GiB for the run, 512 MiB of /tmp, 256 MiB for airlock.
    assert_eq!(
        container["resources"]["limits"],
        json!({"memory": "1792Mi"})
    );
    // The policy selects the template's pods.
    let policy = kind(&rendered, "NetworkPolicy");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        template["spec"]["podTemplate"]["metadata"]["labels"]
    );
    assert!(rendered.notes.is_empty(), "{:?}", rendered.notes);

    // The router in the pods' own namespace: said.
    let mut asked = request(&profile, text);
    asked.router.namespace = "agents".into();
    asked.namespace = "agents".into();
    let rendered = render(&asked).unwrap();
    assert!(
        rendered
            .notes
            .iter()
            .any(|n| n.contains("--router-namespace")),
        "{:?}",
        rendered.notes
    );
}

#[test]
fn no_pool_without_replicas_and_secrets_from_the_credentials_secret() {
    let text = "[network]\nallow = [\"api.github.com:443\"]\n[[secret]]\nname = \"GH_TOKEN\"\nfrom = { env = \"GH_TOKEN\" }\nhosts = [\"api.github.com\"]\ninject = { header = \"Authorization\", format = \"Bearer {}\" }\n";
    let profile = profile(text);
    let mut asked = request(&profile, text);
    asked.pool_size = 0;
    let rendered = render(&asked).unwrap();
    assert!(rendered
        .objects
        .iter()
        .all(|o| o["kind"] != "SandboxWarmPool"));
    let container =
        &kind(&rendered, "SandboxTemplate")["spec"]["podTemplate"]["spec"]["containers"][0];
    let env = container["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({
            "name": "GH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "airlock-agent-credentials", "key": "GH_TOKEN"}},
        })),
        "{env:?}"
    );
}

#[test]
fn paths_of_this_machine_are_said() {
    let text = "[filesystem]\nhide = [\"/home/me/src/app/.env\"]\n";
    let profile = profile(text);
    let rendered = render(&request(&profile, text)).unwrap();
    assert!(
        rendered
            .notes
            .iter()
            .any(|n| n.contains("/home/me/src/app/.env")),
        "{:?}",
        rendered.notes
    );
}

#[test]
fn names_kubernetes_would_refuse_are_refused_with_the_argument() {
    let profile = Profile::builtin_default();
    for (field, value, arg) in [
        ("name", "Airlock", "--name"),
        ("name", "a_b", "--name"),
        ("name", &"a".repeat(41), "--name"),
        ("namespace", "-x", "--namespace"),
        ("domain", "cluster..local", "--cluster-domain"),
        ("image", "a b", "--image"),
    ] {
        let mut asked = request(&profile, "");
        match field {
            "name" => asked.name = value.to_string(),
            "namespace" => asked.namespace = value.to_string(),
            "domain" => asked.cluster_domain = value.to_string(),
            _ => asked.image = value.to_string(),
        }
        let refused = render(&asked).unwrap_err().to_string();
        assert!(refused.starts_with(arg), "{value}: {refused}");
    }
}

#[test]
fn limits_only_a_cgroup_of_airlocks_own_keeps_are_refused() {
    for key in ["cpus = 2", "disk = \"4GiB\"", "files = 1000"] {
        let text = format!("[limits]\n{key}\n");
        let profile = profile(&text);
        let refused = render(&request(&profile, &text)).unwrap_err().to_string();
        let name = key.split(' ').next().unwrap();
        assert!(refused.contains(&format!("[limits] {name}")), "{refused}");
    }
}

#[test]
fn secrets_from_airlocks_own_variables_and_bad_networks_are_refused() {
    let text = "[network]\nallow = [\"api.github.com:443\"]\n[[secret]]\nname = \"T\"\nfrom = { env = \"AIRLOCK_STATE_DIR\" }\nhosts = [\"api.github.com\"]\ninject = { header = \"Authorization\", format = \"Bearer {}\" }\n";
    let profile = profile(text);
    let refused = render(&request(&profile, text)).unwrap_err().to_string();
    assert!(refused.contains("AIRLOCK_STATE_DIR"), "{refused}");

    let profile = Profile::builtin_default();
    for bad in ["0.0.0.0/0", "10.0.0.0/8:80", "example.com", "10.0.0.1/33"] {
        let mut asked = request(&profile, "");
        asked.excluded_cidrs = vec![bad.into()];
        let refused = render(&asked).unwrap_err().to_string();
        assert!(refused.starts_with("--exclude-cidr"), "{bad}: {refused}");
    }
}
