//! `kubectl logs` and `kubectl port-forward` for the pods the podlet runs. The API server sends
//! both to the node's kubelet API, which kwok serves (hack/cluster-up.sh); kwok answers them
//! from two objects of its own, named as the pod and owned by it (so they go with it): `Logs`
//! names the file of each container's output (in the CRI format, `crate::cri_log`), and
//! `PortForward` the pod IP and port behind each container port. Without kwok's CRDs (kind, a
//! cluster started otherwise) there is nothing to write: the pod runs the same.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::debug;

use super::Podlet;

const GROUP: &str = "kwok.x-k8s.io";
const VERSION: &str = "v1alpha1";
const MANAGER: &str = "marekvs-sim";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Metadata of an object named and owned by `pod`.
fn owned_by(pod: &Pod) -> Value {
    json!({
        "name": pod.name_any(),
        "namespace": pod.namespace().unwrap_or_default(),
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod", "name": pod.name_any(),
            "uid": pod.uid().unwrap_or_default(),
        }],
    })
}

/// kwok's `PortForward` for `pod`: each port a container declares, to the same port on `ip`.
pub fn port_forward_object(pod: &Pod, ip: Ipv4Addr) -> Option<Value> {
    let mut ports: Vec<i32> = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten().map(|p| p.container_port))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        return None;
    }
    let forwards: Vec<Value> = ports
        .iter()
        .map(|p| json!({"ports": [p], "target": {"address": ip.to_string(), "port": p}}))
        .collect();
    Some(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "PortForward",
        "metadata": owned_by(pod),
        "spec": {"forwards": forwards},
    }))
}

/// kwok's `Logs` for `pod`: each container's CRI log file.
pub fn logs_object(pod: &Pod, files: &[(String, PathBuf)]) -> Option<Value> {
    if files.is_empty() {
        return None;
    }
    let logs: Vec<Value> = files
        .iter()
        .map(|(c, path)| json!({"containers": [c], "logsFile": path.display().to_string()}))
        .collect();
    Some(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Logs",
        "metadata": owned_by(pod),
        "spec": {"logs": logs},
    }))
}

impl Podlet {
    /// Write `pod`'s `PortForward` and, for the container run as a process here (`logs`), its
    /// `Logs`. Best effort: a failure is logged and the pod runs on.
    pub(super) async fn publish_debugging(
        &self,
        pod: &Pod,
        ip: Ipv4Addr,
        logs: Option<(String, PathBuf)>,
    ) {
        let ns = pod.namespace().unwrap_or_default();
        let objects = [
            (
                resource("PortForward", "portforwards"),
                port_forward_object(pod, ip),
            ),
            (
                resource("Logs", "logs"),
                logs_object(pod, &Vec::from_iter(logs)),
            ),
        ];
        for (ar, object) in objects {
            let Some(object) = object else { continue };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
            let params = PatchParams::apply(MANAGER).force();
            if let Err(e) = api
                .patch(&pod.name_any(), &params, &Patch::Apply(&object))
                .await
            {
                debug!(pod = %pod.name_any(), kind = %ar.kind, "not written: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "demo-0", "namespace": "ns", "uid": "u-0"},
            "spec": {"containers": [
                {"name": "marekvs", "ports": [{"containerPort": 9121}, {"containerPort": 6379}]},
                {"name": "side", "ports": [{"containerPort": 6379}]},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn each_declared_port_forwards_to_the_pod_ip_once() {
        let o = port_forward_object(&pod(), Ipv4Addr::new(127, 2, 0, 5)).unwrap();
        assert_eq!(
            o["spec"]["forwards"],
            json!([
                {"ports": [6379], "target": {"address": "127.2.0.5", "port": 6379}},
                {"ports": [9121], "target": {"address": "127.2.0.5", "port": 9121}},
            ])
        );
        assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "u-0");
        assert_eq!(o["metadata"]["name"], "demo-0");
        let mut bare = pod();
        bare.spec
            .as_mut()
            .unwrap()
            .containers
            .iter_mut()
            .for_each(|c| c.ports = None);
        assert!(port_forward_object(&bare, Ipv4Addr::LOCALHOST).is_none());
    }

    #[test]
    fn a_process_container_names_its_cri_file() {
        let files = [(
            "marekvs".to_string(),
            PathBuf::from("/l/ns_demo-0_marekvs.cri"),
        )];
        let o = logs_object(&pod(), &files).unwrap();
        assert_eq!(
            o["spec"]["logs"],
            json!([{"containers": ["marekvs"], "logsFile": "/l/ns_demo-0_marekvs.cri"}])
        );
        assert!(logs_object(&pod(), &[]).is_none());
    }
}
