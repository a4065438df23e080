//! `airlock k8s render`: the manifests of a pool of airlock pods (see the airlock-k8s crate),
//! from a profile chosen as a run chooses it. The ConfigMap carries the profile's text, and the
//! NetworkPolicy and the pod's resources are rendered from that same text parsed again, so the
//! two cannot disagree (a file changed between reading and rendering).

pub use airlock_k8s::yaml::stream as yaml_stream;
pub use airlock_k8s::{RenderRequest, Rendered, RouterPods};

use crate::caller::{Caller, ProfileChoice};
use crate::error::Error;

/// Everything of the render but the profile, as the command line gave it.
#[derive(Debug, Clone)]
pub struct K8sSettings {
    pub image: String,
    pub namespace: String,
    /// Default: `airlock-PROFILE`.
    pub name: Option<String>,
    pub pool_size: u32,
    pub cluster_domain: String,
    pub router: RouterPods,
    pub client_namespaces: Vec<String>,
    pub excluded_cidrs: Vec<String>,
    /// Where the pods' audit records go besides stdout: an OTLP/HTTP endpoint.
    pub otlp_endpoint: Option<String>,
}

/// The manifests for the profile `choice` names.
pub fn render_manifests(
    caller: &Caller,
    choice: &ProfileChoice,
    settings: K8sSettings,
) -> Result<Rendered, Error> {
    let loaded = crate::policy::effective_profile(caller, choice)?;
    let text = crate::policy::profile_as_written(&loaded)?;
    let origin = loaded
        .source
        .clone()
        .unwrap_or_else(|| format!("(the profile {})", loaded.name).into());
    let profile = airlock_policy::parse_profile(&text, &loaded.name, &origin)?;
    let name = settings
        .name
        .unwrap_or_else(|| format!("airlock-{}", profile.name));
    let config_text = pod_config(settings.otlp_endpoint.as_deref())?;
    let request = RenderRequest {
        profile: &profile,
        profile_text: &text,
        config_text: &config_text,
        image: settings.image,
        namespace: settings.namespace,
        name,
        pool_size: settings.pool_size,
        cluster_domain: settings.cluster_domain,
        router: settings.router,
        client_namespaces: settings.client_namespaces,
        excluded_cidrs: settings.excluded_cidrs,
    };
    airlock_k8s::render(&request).map_err(|refused| match refused {
        airlock_k8s::RenderError::Argument { arg, value, why } => Error::Argument {
            arg: format!("{arg} {value:?}"),
            why,
        },
    })
}

/// The pods' config: every audit record as a JSON line on stdout (what the cluster's log
/// collector reads), and over OTLP/HTTP where an endpoint is given; checked as `airlock serve
/// --config` will check it in the pod, so that a pod never fails to start on what was rendered.
fn pod_config(otlp_endpoint: Option<&str>) -> Result<String, Error> {
    let mut text = String::from(
        "# airlock's config in the pod (docs/audit.md): each audit record as a JSON line on stdout,\n# which the cluster's log collector reads; add \"otlp\" and [audit.otlp] for a collector.\n[audit]\n",
    );
    match otlp_endpoint {
        None => text.push_str("export = [\"stdout\"]\n"),
        Some(endpoint) => {
            let endpoint = serde_json::to_string(endpoint)?;
            text.push_str(&format!(
                "export = [\"stdout\", \"otlp\"]\n\n[audit.otlp]\nendpoint = {endpoint}\n"
            ));
        }
    }
    let path = std::path::Path::new("/etc/airlock/config/config.toml");
    crate::config::parse(path, &text, &|_| None).map_err(|refused| Error::Argument {
        arg: "--otlp-endpoint".into(),
        why: refused.to_string(),
    })?;
    Ok(text)
}
