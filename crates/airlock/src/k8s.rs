//! `airlock k8s render`: the arguments as core's render settings, the manifests as YAML (or JSON).

use std::process::ExitCode;

use anyhow::{bail, Result};

use airlock_core::k8s::{K8sSettings, RouterPods};
use airlock_core::ProfileChoice;

use crate::cli::{GlobalArgs, K8sRenderArgs};

pub fn render(global: &GlobalArgs, args: K8sRenderArgs) -> Result<ExitCode> {
    let labels = args
        .router_labels
        .iter()
        .map(|label| match label.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
            _ => bail!("--router-label {label:?}: write KEY=VALUE, e.g. app.kubernetes.io/name=sandbox-router"),
        })
        .collect::<Result<Vec<_>>>()?;
    let settings = K8sSettings {
        image: args.image,
        router: RouterPods {
            namespace: args
                .router_namespace
                .unwrap_or_else(|| args.namespace.clone()),
            labels,
        },
        namespace: args.namespace,
        name: args.name,
        pool_size: args.pool,
        cluster_domain: args.cluster_domain,
        client_namespaces: args.client_namespaces,
        excluded_cidrs: args.excluded_cidrs,
        otlp_endpoint: args.otlp_endpoint,
    };
    let choice = ProfileChoice {
        name: Some(args.profile),
        file: None,
    };
    let rendered =
        airlock_core::k8s::render_manifests(&crate::run::caller(global), &choice, settings)?;
    for note in &rendered.notes {
        crate::shown::note!("airlock: note: {note}");
    }
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&rendered.objects)?);
    } else {
        let header = [
            format!(
                "airlock {}: agent-sandbox manifests (airlock k8s render); docs/kubernetes.md",
                env!("CARGO_PKG_VERSION")
            ),
            "The NetworkPolicy holds the pods to public addresses on the profile's ports; which domains they reach is airlock's gate's decision, by the profile.".to_string(),
        ];
        crate::shown::out!(text: airlock_core::k8s::yaml_stream(&header, &rendered.objects));
    }
    Ok(ExitCode::SUCCESS)
}
