//! Pods of the operator image, run as the operator binary (`--operator-bin`).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;

use crate::operator_pod;
use crate::real_node::{PodLog, RealNode, StartFailure, start_header};

use super::Podlet;
use super::env::resolve_env;
use super::process::MemberProcess;

impl Podlet {
    /// With `--operator-bin`: the container that runs the operator image.
    pub(super) fn operator_container<'a>(&self, pod: &'a Pod) -> Option<&'a Container> {
        self.operator_bin.as_ref()?;
        pod.spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| self.is_operator(c))
    }

    pub(super) fn is_operator(&self, container: &Container) -> bool {
        self.operator_bin.is_some()
            && container
                .image
                .as_deref()
                .is_some_and(operator_pod::is_operator_image)
    }

    /// Run the operator binary as the container would run the image: its args (after the
    /// image's entrypoint), its env, its listener on the pod IP, the ServiceAccount's token.
    pub(super) async fn start_operator(
        &self,
        pod: &Pod,
        container: &Container,
        ip: Ipv4Addr,
        start: u64,
        restart_count: i32,
    ) -> Result<MemberProcess, StartFailure> {
        let image = container.image.as_deref().unwrap_or_default();
        let bin = operator_pod::binary_for(
            image,
            self.operator_bin.as_deref(),
            &self.operator_bins_by_tag,
        )
        .ok_or_else(|| StartFailure::create("no --operator-bin"))?;
        let ns = pod.namespace().unwrap_or_default();
        let mut env = resolve_env(pod, container, ip);
        env.extend(self.secret_env(&ns, container).await?);
        env.insert("HOSTNAME".into(), pod.name_any());
        let args = operator_args(container).map_err(StartFailure::create)?;
        let (args, mut env) =
            operator_pod::on_pod_ip(&args, &env, ip).map_err(StartFailure::create)?;
        let kubeconfig = self
            .service_account_kubeconfig(pod)
            .await
            .map_err(|e| StartFailure::create(format!("{e:#}")))?;
        env.insert("KUBECONFIG".into(), kubeconfig.display().to_string());
        let log = PodLog::new(&self.pod_logs_dir, &ns, &pod.name_any(), &container.name);
        let header = start_header(start, restart_count, &Timestamp::now(), bin);
        let node = RealNode::spawn(bin, &env, &args, &log, &header)?;
        Ok(MemberProcess::Operator {
            node: Box::new(node),
        })
    }

    /// What stands in for the in-cluster config: a kubeconfig with a token of the pod's
    /// ServiceAccount (TokenRequest, bound to the pod, as the kubelet's projected token is) and
    /// the API server and CA of the podlet's own kubeconfig. Written 0600 beside the volumes.
    async fn service_account_kubeconfig(&self, pod: &Pod) -> anyhow::Result<PathBuf> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let ns = pod.namespace().unwrap_or_default();
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(24 * 3600),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                }),
            },
            ..TokenRequest::default()
        };
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), &ns);
        let token = accounts
            .create_token_request(&account, &Default::default(), &request)
            .await
            .with_context(|| format!("requesting a token of ServiceAccount {ns}/{account}"))?
            .status
            .map(|s| s.token)
            .ok_or_else(|| anyhow!("the TokenRequest for {ns}/{account} has no token"))?;
        let config = kube::config::Kubeconfig::read().context("reading the podlet's KUBECONFIG")?;
        let context = config.current_context.clone().unwrap_or_default();
        let cluster_name = config
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
            .ok_or_else(|| anyhow!("the podlet's KUBECONFIG has no context {context:?}"))?;
        let cluster = config
            .clusters
            .iter()
            .find(|c| c.name == cluster_name)
            .and_then(|c| c.cluster.as_ref())
            .ok_or_else(|| anyhow!("the podlet's KUBECONFIG has no cluster {cluster_name:?}"))?;
        let kubeconfig =
            operator_pod::kubeconfig(&serde_json::to_value(cluster)?, &account, &token);
        let dir = self
            .volumes_dir
            .parent()
            .unwrap_or(&self.volumes_dir)
            .join("pod-credentials");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{ns}_{}.kubeconfig", pod.name_any()));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        file.write_all(serde_json::to_string_pretty(&kubeconfig)?.as_bytes())?;
        Ok(path)
    }
}

/// The operator's arguments: the container's `args`, after its `command` if that is the
/// image's entrypoint (anything else is not the operator, so it cannot be run here).
fn operator_args(container: &Container) -> Result<Vec<String>, String> {
    let args = container.args.clone().unwrap_or_default();
    match container.command.as_deref() {
        None | Some([]) => Ok(args),
        Some([entry, rest @ ..]) if entry.rsplit('/').next() == Some("marekvs-operator") => {
            Ok(rest.iter().cloned().chain(args).collect())
        }
        Some(command) => Err(format!(
            "command {command:?} is not the operator image's entrypoint /marekvs-operator: the harness runs only the operator binary"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_runs_with_its_args_after_the_images_entrypoint_only() {
        let mut c = Container {
            args: Some(vec!["run".into(), "--namespace=x".into()]),
            ..Container::default()
        };
        assert_eq!(operator_args(&c).unwrap(), ["run", "--namespace=x"]);
        c.command = Some(vec!["/marekvs-operator".into(), "run".into()]);
        c.args = Some(vec!["--leader-elect=false".into()]);
        assert_eq!(operator_args(&c).unwrap(), ["run", "--leader-elect=false"]);
        c.command = Some(vec!["/bin/sh".into(), "-c".into()]);
        let err = operator_args(&c).unwrap_err();
        assert!(err.contains("/bin/sh"), "{err}");
    }
}
