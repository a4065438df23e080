//! Kubernetes manifests for a pool of airlock pods under kubernetes-sigs/agent-sandbox, from a
//! profile (`airlock k8s render`). Pure: a profile and the cluster's names in, objects out.
//!
//! What each object is for:
//! - a ConfigMap with the profile, mounted where airlock looks for profiles, and one with
//!   airlock's config (the audit log exported as JSON lines on stdout, where the cluster's log
//!   collector reads it, and to an OpenTelemetry collector if one is named);
//! - a `SandboxTemplate` (extensions.agents.x-k8s.io/v1beta1) whose pod runs airlock's image as
//!   the agent-sandbox runtime: a user namespace (`hostUsers: false`) and a securityContext that
//!   gives what airlock needs to build its sandbox in it and nothing more (docs/kubernetes.md has
//!   why each field), resources from the profile's limits, the API's tokens from a Secret;
//! - a `SandboxWarmPool` of such pods, ready before an agent asks;
//! - a NetworkPolicy (the template's own management is off: agent-sandbox's default policy would
//!   add to ours) that admits only the router and lets the pod out only to what the profile allows,
//!   by address and port ([`network`]).

mod network;
pub mod yaml;

use airlock_policy::{Profile, SecretSource};
use serde_json::{json, Value};

pub use network::{RouterPods, SERVED_PORTS};

/// The user airlock runs as in its image (packaging/oci/Containerfile).
pub const IMAGE_UID: u64 = 1000;

/// Where the image keeps what the pod mounts.
const PROFILE_DIR: &str = "/etc/airlock/profiles";
const CONFIG_DIR: &str = "/etc/airlock/config";
const TOKENS_DIR: &str = "/etc/airlock/tokens";
const STATE_VOLUME_DIR: &str = "/var/lib/airlock";
const WORKSPACE_DIR: &str = "/workspace";

/// Memory for airlock itself beside the runs (the server, its gate, a run's supervisor).
const SERVER_MEMORY: u64 = 256 << 20;
/// CPU asked for airlock itself, in thousandths of a CPU.
const SERVER_MILLICPUS: u64 = 250;

/// What to render, as the command line gave it.
#[derive(Debug, Clone)]
pub struct RenderRequest<'a> {
    pub profile: &'a Profile,
    /// The profile's file as written (the built-in default: empty), for the ConfigMap.
    pub profile_text: &'a str,
    /// airlock's config file for the pod (`[audit] export`), already validated by core.
    pub config_text: &'a str,
    pub image: String,
    pub namespace: String,
    /// The objects' names start with it.
    pub name: String,
    /// Pods kept warm; 0 renders no pool.
    pub pool_size: u32,
    pub cluster_domain: String,
    pub router: RouterPods,
    /// Namespaces whose pods may also reach the pod's ports directly (sandboxd's in-cluster
    /// clients connect to the pod's address, not through the router).
    pub client_namespaces: Vec<String>,
    /// The cluster's own networks (pods, services, nodes) to keep out of "public" where they
    /// are not private addresses already, as CIDRs (`--exclude-cidr`).
    pub excluded_cidrs: Vec<String>,
}

/// The objects, and what the person should know about them.
#[derive(Debug)]
pub struct Rendered {
    pub objects: Vec<Value>,
    /// Things the profile names that the pod will not have as they are on this machine.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{arg} {value:?}: {why}")]
    Argument {
        arg: &'static str,
        value: String,
        why: String,
    },
}

fn bad(arg: &'static str, value: &str, why: &str) -> RenderError {
    RenderError::Argument {
        arg,
        value: value.to_string(),
        why: why.to_string(),
    }
}

/// The manifests for `request`, or which argument cannot be a Kubernetes name.
pub fn render(request: &RenderRequest) -> Result<Rendered, RenderError> {
    check_request(request)?;
    check_limits_a_pod_keeps(request.profile)?;
    check_secret_variables(request.profile)?;
    let excluded = excluded_networks(&request.excluded_cidrs)?;
    let names = Names::of(request);
    let labels = json!({
        "app.kubernetes.io/name": "airlock",
        "app.kubernetes.io/instance": request.name,
        "app.kubernetes.io/component": "agent-sandbox-runtime",
    });
    let mut objects = vec![
        config_map(
            request,
            &names.config_map,
            &profile_file_name(request.profile),
            request.profile_text,
            &labels,
        ),
        config_map(
            request,
            &names.airlock_config,
            "config.toml",
            request.config_text,
            &labels,
        ),
        sandbox_template(request, &names, &labels),
    ];
    if request.pool_size > 0 {
        objects.push(warm_pool(request, &labels));
    }
    objects.push(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(&request.name, request, &labels),
        "spec": network::policy_spec(
            &labels,
            &request.profile.network,
            &request.router,
            &request.client_namespaces,
            &excluded,
        ),
    }));
    Ok(Rendered {
        objects,
        notes: notes(request),
    })
}

/// The names of the objects the template refers to.
struct Names {
    config_map: String,
    airlock_config: String,
    tokens_secret: String,
    credentials_secret: String,
}

impl Names {
    fn of(request: &RenderRequest) -> Names {
        Names {
            config_map: format!("{}-profile", request.name),
            airlock_config: format!("{}-config", request.name),
            tokens_secret: format!("{}-tokens", request.name),
            credentials_secret: format!("{}-credentials", request.name),
        }
    }
}

/// Limits airlock enforces with a cgroup or a quota of its own, which a pod never gives a
/// container (Kubernetes delegates no cgroup to it): airlock would refuse every run of such a
/// profile there. The pod's own limits hold all its runs together instead.
fn check_limits_a_pod_keeps(profile: &Profile) -> Result<(), RenderError> {
    let limits = &profile.limits;
    let kept_by_cgroup = [
        ("cpus", limits.millicpus.is_some()),
        ("disk", limits.disk_bytes.is_some()),
        ("files", limits.files.is_some()),
    ];
    match kept_by_cgroup.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(bad(
            "PROFILE",
            &profile.name,
            &format!("its [limits] {key} needs a cgroup or a quota of airlock's own, which no pod gives a container: airlock in the pod would refuse every run; take {key} out of the profile (the pod's memory limit, from the profile's memory and tmp_size, holds all its runs together)"),
        )),
        None => Ok(()),
    }
}

/// Variables airlock itself reads from its environment (where its state is, where profiles
/// are found): a `[[secret]]` read from one of them would have the Secret set it for airlock.
fn check_secret_variables(profile: &Profile) -> Result<(), RenderError> {
    for secret in &profile.secrets {
        let SecretSource::Env(variable) = &secret.source else {
            continue;
        };
        let airlocks_own = variable.starts_with("AIRLOCK_")
            || variable.starts_with("XDG_")
            || matches!(variable.as_str(), "HOME" | "PATH" | "USER" | "TMPDIR");
        if airlocks_own {
            return Err(bad(
                "PROFILE",
                &profile.name,
                &format!("secret {} is read from {variable}, which airlock itself reads in the pod: read it from a variable of its own (from = {{ env = \"{}_VALUE\" }})", secret.name, secret.name),
            ));
        }
    }
    Ok(())
}

/// `--exclude-cidr` values as networks (an IPv4-mapped IPv6 one as the IPv4 network).
fn excluded_networks(cidrs: &[String]) -> Result<Vec<(std::net::IpAddr, u8)>, RenderError> {
    cidrs
        .iter()
        .map(|text| match airlock_rules::Destination::parse(text) {
            Ok(airlock_rules::Destination::Net {
                addr,
                prefix,
                port: None,
            }) if prefix > 0 => Ok(network::canonical_net(addr, prefix)),
            _ => Err(bad(
                "--exclude-cidr",
                text,
                "a network such as 10.96.0.0/12 or fd00:10::/108 (no port, not all addresses)",
            )),
        })
        .collect()
}

/// Names Kubernetes takes (DNS labels), short enough for the suffixes added to them.
fn check_request(request: &RenderRequest) -> Result<(), RenderError> {
    // "-credentials" is the longest suffix; a pod's name adds agent-sandbox's own.
    if !is_dns_label(&request.name) || request.name.len() > 40 {
        return Err(bad(
            "--name",
            &request.name,
            "a Kubernetes name: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 40 characters",
        ));
    }
    for namespace in std::iter::once(&request.namespace)
        .chain(std::iter::once(&request.router.namespace))
        .chain(&request.client_namespaces)
    {
        if !is_dns_label(namespace) {
            return Err(bad(
                "--namespace",
                namespace,
                "a namespace is a DNS label: lower-case letters, digits and '-', at most 63",
            ));
        }
    }
    let domain_ok = request.cluster_domain.split('.').all(is_dns_label);
    if !domain_ok {
        return Err(bad(
            "--cluster-domain",
            &request.cluster_domain,
            "a DNS name, such as cluster.local",
        ));
    }
    if request.image.is_empty()
        || request
            .image
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad(
            "--image",
            &request.image,
            "an image reference, such as registry.example/airlock:0.1.0",
        ));
    }
    Ok(())
}

/// Bytes as a Kubernetes quantity: in MiB where that is exact (what a person writes), else bytes.
fn quantity(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{}Mi", bytes / MIB)
    } else {
        bytes.to_string()
    }
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

fn metadata(name: &str, request: &RenderRequest, labels: &Value) -> Value {
    json!({"name": name, "namespace": request.namespace, "labels": labels})
}

fn profile_file_name(profile: &Profile) -> String {
    format!("{}.toml", profile.name)
}

fn config_map(request: &RenderRequest, name: &str, key: &str, text: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, request, labels),
        "data": {key: text},
    })
}

fn sandbox_template(request: &RenderRequest, names: &Names, labels: &Value) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": metadata(&request.name, request, labels),
        "spec": {
            // Ours is the NetworkPolicy rendered beside it; agent-sandbox's would add to it.
            "networkPolicyManagement": "Unmanaged",
            "envVarsInjectionPolicy": "Disallowed",
            "podTemplate": {
                "metadata": {"labels": labels},
                "spec": pod_spec(request, names),
            },
        },
    })
}

fn warm_pool(request: &RenderRequest, labels: &Value) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": metadata(&request.name, request, labels),
        "spec": {
            "replicas": request.pool_size,
            "sandboxTemplateRef": {"name": request.name},
        },
    })
}

fn pod_spec(request: &RenderRequest, names: &Names) -> Value {
    json!({
        // The pod's own user namespace: airlock makes its sandbox's namespaces inside it as an
        // unprivileged user, and the pod's root is not the node's.
        "hostUsers": false,
        // Nothing in the pod talks to the Kubernetes API; its credentials would be the agent's.
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": IMAGE_UID,
            "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID,
            // RuntimeDefault (containerd's, CRI-O's) refuses unshare, mount and pivot_root
            // without CAP_SYS_ADMIN; airlock applies its own, stricter filter to every run.
            "seccompProfile": {"type": "Unconfined"},
        },
        "containers": [container(request, names)],
        "volumes": [
            {"name": "profile", "configMap": {"name": names.config_map}},
            {"name": "config", "configMap": {"name": names.airlock_config}},
            {"name": "tokens", "secret": {"secretName": names.tokens_secret, "optional": true, "defaultMode": 0o440}},
            {"name": "state", "emptyDir": {}},
            {"name": "workspace", "emptyDir": {}},
            // The root is read-only; airlock's own temporary files (a throwaway run's empty
            // workspace, `airlock check`'s trial run) go here. Runs have a /tmp of their own.
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        ],
    })
}

fn container(request: &RenderRequest, names: &Names) -> Value {
    let profile = request.profile;
    let limits = &profile.limits;
    // A run's memory and its /tmp (a tmpfs, charged to the same cgroup), and airlock's own.
    let memory = limits
        .memory_bytes
        .saturating_add(limits.tmp_bytes)
        .saturating_add(SERVER_MEMORY);
    let resources = json!({
        "requests": {"memory": quantity(SERVER_MEMORY), "cpu": format!("{SERVER_MILLICPUS}m")},
        "limits": {"memory": quantity(memory)},
    });
    let ports: Vec<Value> = SERVED_PORTS
        .iter()
        .map(|(name, port)| json!({"name": name, "containerPort": port, "protocol": "TCP"}))
        .collect();
    json!({
        "name": "airlock",
        "image": request.image,
        "args": serve_args(request),
        "env": container_env(profile, names),
        "ports": ports,
        "readinessProbe": {"httpGet": {"path": "/v1/health", "port": SERVED_PORTS[0].1}},
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            // A /proc with nothing masked: the kernel lets airlock mount the run's own /proc
            // only then. Allowed only with hostUsers: false, where /proc/sys is the pod's.
            "procMount": "Unmasked",
            "readOnlyRootFilesystem": true,
            // The runtime's default AppArmor profile denies mount.
            "appArmorProfile": {"type": "Unconfined"},
        },
        "volumeMounts": [
            {"name": "profile", "mountPath": PROFILE_DIR, "readOnly": true},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": true},
            {"name": "tokens", "mountPath": TOKENS_DIR, "readOnly": true},
            {"name": "state", "mountPath": STATE_VOLUME_DIR},
            {"name": "workspace", "mountPath": WORKSPACE_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    })
}

fn serve_args(request: &RenderRequest) -> Vec<String> {
    let [(_, runtime), (_, rest), (_, grpc)] = SERVED_PORTS;
    [
        "serve",
        "--listen",
        &format!("0.0.0.0:{runtime}"),
        // agent-sandbox's router speaks plain HTTP to its pods; the NetworkPolicy admits only it.
        "--allow-clear-text",
        "--host-name",
        &format!("*.{}.svc.{}", request.namespace, request.cluster_domain),
        "--tokens-file",
        &format!("{TOKENS_DIR}/tokens.json"),
        "--config",
        &format!("{CONFIG_DIR}/config.toml"),
        "--agent-sandbox",
        "--workspace",
        WORKSPACE_DIR,
        "--profile",
        &request.profile.name,
        "--sandboxd-rest",
        &format!("0.0.0.0:{rest}"),
        "--sandboxd-grpc",
        &format!("0.0.0.0:{grpc}"),
    ]
    .into_iter()
    .map(str::to_string)
    .collect()
}

/// The pod's name for exported records, airlock's state directory inside the state volume
/// (airlock makes it, its own, in the volume the kubelet made), and the values of the profile's `[[secret]]`s read from airlock's
/// environment: from a Secret, as variables of airlock's container (never of the sandbox, which
/// sees only placeholders).
fn container_env(profile: &Profile, names: &Names) -> Vec<Value> {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    // The pod's name on each exported record (OpenTelemetry's resource): what keeps the chains
    // of a pool's pods apart in one collector.
    let identity = [
        field("POD_NAME", "metadata.name"),
        field("POD_NAMESPACE", "metadata.namespace"),
        json!({"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)"}),
    ];
    let state = json!({"name": "AIRLOCK_STATE_DIR", "value": format!("{STATE_VOLUME_DIR}/state")});
    let credentials = profile
        .secrets
        .iter()
        .filter_map(|secret| match &secret.source {
            SecretSource::Env(variable) => Some(json!({
                "name": variable,
                "valueFrom": {"secretKeyRef": {"name": names.credentials_secret, "key": variable}},
            })),
            _ => None,
        });
    identity
        .into_iter()
        .chain(std::iter::once(state))
        .chain(credentials)
        .collect()
}

/// What the person should know: what the profile names that the pod does not have as this
/// machine does, and who else could reach the pods.
fn notes(request: &RenderRequest) -> Vec<String> {
    let profile = request.profile;
    let mut notes = Vec::new();
    if request.router.namespace == request.namespace {
        notes.push(format!(
            "the router is looked for in the pods' own namespace {}: whoever may make pods there can label one as the router and reach these pods' runtime, which takes no token; give agent-sandbox's router a namespace of its own (--router-namespace)",
            request.namespace
        ));
    }
    let fs = &profile.filesystem;
    for path in fs.read_only.iter().chain(&fs.read_write).chain(&fs.hide) {
        if !path.starts_with(WORKSPACE_DIR) {
            notes.push(format!(
                "the profile names {}: in the pod, that is the image's path, not this machine's (the workspace is {WORKSPACE_DIR})",
                path.display()
            ));
        }
    }
    for secret in &profile.secrets {
        match &secret.source {
            SecretSource::Env(_) => {}
            other => notes.push(format!(
                "secret {} comes from {other}: the pod must have it there (a Secret mounted at that path); only 'env' secrets are wired from the Secret <name>-credentials",
                secret.name
            )),
        }
    }
    notes
}

#[cfg(test)]
mod tests;
