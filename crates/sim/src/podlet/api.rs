//! The podlet's writes to the API server: pod status patches and deletes, retried as a kubelet
//! retries.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tracing::debug;

use crate::container_state::{MemberStatus, container_statuses};

use super::Podlet;

impl Podlet {
    /// The pod's whole status; `member` is the marekvs container's name and status.
    pub(super) async fn patch_status(
        &self,
        pods: &Api<Pod>,
        pod: &Pod,
        ip: Ipv4Addr,
        host_ip: &str,
        started: &Timestamp,
        member: Option<(&str, &MemberStatus)>,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let ready = member.is_none_or(|(_, m)| m.reported_ready());
        let ready_s = if ready { "True" } else { "False" };
        let patch = json!({
            "status": {
                "phase": "Running",
                "podIP": ip.to_string(),
                "podIPs": [{"ip": ip.to_string()}],
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "startTime": started.to_string(),
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready_s, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready_s, "lastTransitionTime": now},
                ],
                "containerStatuses": container_statuses(pod, member, started),
            }
        });
        let (name, params, patch) = (
            pod.name_any(),
            PatchParams::default(),
            Patch::Strategic(patch),
        );
        with_api_retry(|| pods.patch_status(&name, &params, &patch))
            .await
            .with_context(|| format!("patching status of {name}"))?;
        Ok(())
    }

    /// The member container's status and the readiness that follows from it, and the pod's
    /// phase when given (a pod whose container finished for good).
    pub(super) async fn patch_member(
        &self,
        pods: &Api<Pod>,
        pod: &Pod,
        started: &Timestamp,
        container: &str,
        member: &MemberStatus,
        phase: Option<&str>,
    ) -> anyhow::Result<()> {
        let now = Timestamp::now().to_string();
        let ready_s = if member.reported_ready() {
            "True"
        } else {
            "False"
        };
        let patch = json!({
            "status": {
                "conditions": [
                    {"type": "ContainersReady", "status": ready_s, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready_s, "lastTransitionTime": now},
                ],
                "containerStatuses": container_statuses(pod, Some((container, member)), started),
            }
        });
        let mut patch = patch;
        if let Some(phase) = phase {
            patch["status"]["phase"] = json!(phase);
        }
        let (name, params, patch) = (
            pod.name_any(),
            PatchParams::default(),
            Patch::Strategic(patch),
        );
        match with_api_retry(|| pods.patch_status(&name, &params, &patch)).await {
            Ok(_) => Ok(()),
            // The pod may be gone already; the watch will tell the worker.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn delete_now(&self, pod: &Pod) -> anyhow::Result<()> {
        let pods: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let name = pod.name_any();
        match with_api_retry(|| pods.delete(&name, &dp)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Like a kubelet, keep trying while the API server is away or overloaded: transport errors,
/// 429 and 5xx are retried (0.2 s, doubling to 5 s) for up to two minutes. Without this, a pod
/// whose final delete fell into an API server restart stayed Terminating for ever.
async fn with_api_retry<T, F, Fut>(mut call: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut delay = Duration::from_millis(200);
    loop {
        match call().await {
            Err(e) if is_transient(&e) && tokio::time::Instant::now() < deadline => {
                debug!("API call failed, retrying in {delay:?}: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            result => return result,
        }
    }
}

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::SerdeError(_) => false,
        _ => true,
    }
}
