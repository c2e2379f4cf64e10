//! Starting a member pod's process: a simulated member in the model, or a real marekvs binary.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use tracing::warn;

use marekvs_core::units::quantity_bytes;

use crate::model::{Faults, MemberSpec};
use crate::node_http::{self, METRICS_PORT};
use crate::node_resp::{self, RESP_PORT};
use crate::real_node::{
    GOSSIP_PORT, NodeEnv, PodLog, RealNode, StartFailure, node_env, start_header,
};

use super::Podlet;
use super::env::resolve_env;
use super::process::{MemberProcess, forget_real};

impl Podlet {
    /// Start the member process: `start` counts the attempts for this pod (for the log).
    pub(super) async fn start_member(
        &self,
        pod: &Pod,
        container: &Container,
        key: &str,
        ip: Ipv4Addr,
        start: u64,
        restart_count: i32,
    ) -> Result<MemberProcess, StartFailure> {
        if self.is_operator(container) {
            return self
                .start_operator(pod, container, ip, start, restart_count)
                .await;
        }
        let ns = pod.namespace().unwrap_or_default();
        let mut env = resolve_env(pod, container, ip);
        env.extend(self.secret_env(&ns, container).await?);
        let node_id = env
            .get("MAREKVS_NODE_ID")
            .cloned()
            .unwrap_or_else(|| ordinal_of(pod));
        let replicas_n: usize = env
            .get("MAREKVS_REPLICAS_N")
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let cluster = format!(
            "{ns}/{}",
            env.get("MAREKVS_SEEDS").cloned().unwrap_or_default()
        );
        let (volume, disk_bytes) = self
            .volume_of(pod)
            .await
            .map_err(|e| StartFailure::create(format!("{e:#}")))?;

        if let Some(bin) = &self.real_bin {
            let data_dir = self.volumes_dir.join(&volume);
            std::fs::create_dir_all(&data_dir).map_err(|e| {
                StartFailure::create(format!("creating {}: {e}", data_dir.display()))
            })?;
            let seeds: Vec<String> = {
                let mut reg = self.real_members.lock().unwrap_or_else(|e| e.into_inner());
                let members = reg.entry(cluster.clone()).or_default();
                let seeds = members
                    .iter()
                    .filter(|(k, _)| k.as_str() != key)
                    .map(|(_, ip)| format!("{ip}:{GOSSIP_PORT}"))
                    .collect();
                members.insert(key.to_string(), ip);
                seeds
            };
            let add = NodeEnv {
                ip,
                node_id: &node_id,
                data_dir: &data_dir,
                seeds: &seeds,
            };
            let (env, warnings) = match node_env(&env, &add) {
                Ok(composed) => composed,
                Err(e) => {
                    // Not running: not a seed for the others either.
                    self.forget_real(&cluster, key);
                    return Err(e);
                }
            };
            for w in warnings {
                warn!(pod = %key, "{w}");
            }
            let log = PodLog::new(&self.pod_logs_dir, &ns, &pod.name_any(), &container.name);
            let header = start_header(start, restart_count, &Timestamp::now(), bin);
            let args = container.args.clone().unwrap_or_default();
            return match RealNode::spawn(bin, &env, &args, &log, &header) {
                Ok(node) => Ok(MemberProcess::Real {
                    node: Box::new(node),
                    cluster,
                }),
                Err(e) => {
                    // Not running: not a seed for the others either.
                    self.forget_real(&cluster, key);
                    Err(e)
                }
            };
        }

        self.world.lock().start_member(
            &cluster,
            MemberSpec {
                key: key.to_string(),
                node_id,
                replicas_n,
                volume,
                disk_bytes,
                faults: Faults::default(),
                addr: ip.to_string(),
                version: crate::model::version_of_image(
                    container.image.as_deref().unwrap_or_default(),
                ),
            },
        );
        let servers = async {
            let http = node_http::serve(self.world.clone(), key.to_string(), IpAddr::V4(ip))
                .await
                .with_context(|| format!("binding {ip}:{METRICS_PORT}"))?;
            let requirepass = env.get("MAREKVS_REQUIREPASS").cloned();
            let resp = node_resp::serve(
                self.world.clone(),
                key.to_string(),
                IpAddr::V4(ip),
                requirepass,
            )
            .await
            .with_context(|| format!("binding {ip}:{RESP_PORT}"))?;
            anyhow::Ok((http, resp))
        };
        match servers.await {
            Ok((http, resp)) => Ok(MemberProcess::Sim {
                key: key.to_string(),
                _http: http,
                _resp: resp,
            }),
            Err(e) => {
                // A member nobody can reach is no member: take it out of the model again.
                self.world.lock().remove_member(key);
                Err(StartFailure::create(format!("{e:#}")))
            }
        }
    }

    fn forget_real(&self, cluster: &str, key: &str) {
        forget_real(&self.real_members, cluster, key);
    }

    /// The volume a member keeps its data on: its PVC's UID (an emptyDir lives as long as the pod).
    async fn volume_of(&self, pod: &Pod) -> anyhow::Result<(String, u64)> {
        let claim = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .and_then(|vs| vs.iter().find_map(|v| v.persistent_volume_claim.as_ref()))
            .map(|c| c.claim_name.clone());
        let Some(claim) = claim else {
            return Ok((format!("pod-{}", pod.uid().unwrap_or_default()), 1 << 30));
        };
        let pvcs: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let pvc = pvcs
            .get(&claim)
            .await
            .with_context(|| format!("reading PVC {claim}"))?;
        let bytes = pvc
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| quantity_bytes(&q.0))
            .map(|b| b as u64)
            .unwrap_or(1 << 30);
        Ok((
            pvc.uid().ok_or_else(|| anyhow!("PVC {claim} has no uid"))?,
            bytes,
        ))
    }
}

/// Node id from the hostname ordinal (`demo-3` → `3`), as a real node derives it.
fn ordinal_of(pod: &Pod) -> String {
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.name_any());
    match host.rsplit_once('-') {
        Some((_, ord)) if !ord.is_empty() && ord.chars().all(|c| c.is_ascii_digit()) => {
            ord.to_string()
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_is_the_hostname_ordinal() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("demo-12".into());
        assert_eq!(ordinal_of(&pod), "12");
        pod.metadata.name = Some("standalone".into());
        assert_eq!(ordinal_of(&pod), "standalone");
    }
}
