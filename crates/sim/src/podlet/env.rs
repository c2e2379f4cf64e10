//! A container's environment: its values, the downward-API fields and Secret keys.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use kube::api::Api;

use crate::real_node::StartFailure;

use super::Podlet;

/// The container's environment with the downward-API fields this harness can answer.
pub(super) fn resolve_env(
    pod: &Pod,
    container: &Container,
    ip: Ipv4Addr,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in container.env.as_deref().unwrap_or_default() {
        let value = if let Some(v) = &e.value {
            Some(v.clone())
        } else if let Some(f) = e.value_from.as_ref().and_then(|vf| vf.field_ref.as_ref()) {
            match f.field_path.as_str() {
                "metadata.name" => Some(pod.name_any()),
                "metadata.namespace" => pod.namespace(),
                "status.podIP" => Some(ip.to_string()),
                "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                _ => None,
            }
        } else {
            None
        };
        if let Some(v) = value {
            env.insert(e.name.clone(), v);
        }
    }
    env
}

impl Podlet {
    /// The container's variables from Secret keys (`valueFrom.secretKeyRef`), read as a
    /// kubelet does: a missing Secret or key (not optional) keeps the container from starting.
    pub(super) async fn secret_env(
        &self,
        ns: &str,
        container: &Container,
    ) -> Result<BTreeMap<String, String>, StartFailure> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), ns);
        let mut env = BTreeMap::new();
        for e in container.env.as_deref().unwrap_or_default() {
            let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|vf| vf.secret_key_ref.as_ref())
            else {
                continue;
            };
            let value = match secrets.get_opt(&r.name).await {
                Ok(s) => s
                    .and_then(|s| s.data)
                    .and_then(|d| d.get(&r.key).cloned())
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
                Err(err) => {
                    return Err(StartFailure::create(format!(
                        "reading secret {ns}/{}: {err}",
                        r.name
                    )));
                }
            };
            match value {
                Some(v) => {
                    env.insert(e.name.clone(), v);
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(StartFailure::create(format!(
                        "secret {ns}/{} has no key {} (CreateContainerConfigError)",
                        r.name, r.key
                    )));
                }
            }
        }
        Ok(env)
    }
}
