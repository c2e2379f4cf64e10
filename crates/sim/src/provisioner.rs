//! A small dynamic provisioner for the harness StorageClass: every PVC of that class gets a
//! PV made for it (pre-bound through `claimRef`, so kube-controller-manager's binder binds
//! them), Released PVs with reclaim policy Delete are deleted, and a grown request is
//! reflected in the PV and the PVC's status capacity (what an external resizer would do).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use marekvs_core::units::quantity_bytes;

/// The `provisioner` of the harness StorageClass (see `hack/cluster-up.sh`).
pub const PROVISIONER: &str = "marekvs.io/sim-hostpath";

pub struct Provisioner {
    pub client: Client,
    pub volumes_dir: PathBuf,
}

/// Claims handled at once: one at a time bound about 4 PVCs a second at 1,600 members.
const CONCURRENT_CLAIMS: usize = 16;
/// How often a claim is tried before the provisioner waits for its next event (about 30 s).
const CLAIM_ATTEMPTS: u32 = 10;

impl Provisioner {
    pub async fn run(self) -> anyhow::Result<()> {
        let me = Arc::new(Worker {
            client: self.client,
            volumes_dir: self.volumes_dir,
            classes: Mutex::new(HashMap::new()),
        });
        me.run().await
    }
}

struct Worker {
    client: Client,
    volumes_dir: PathBuf,
    /// Whether a StorageClass is ours, by name. A class's provisioner cannot change, so a
    /// class seen once is never looked up again (a GET per PVC event before).
    classes: Mutex<HashMap<String, bool>>,
}

impl Worker {
    async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let slots = Arc::new(Semaphore::new(CONCURRENT_CLAIMS));
        let pvcs = watcher::watcher(
            Api::<PersistentVolumeClaim>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects()
        .boxed();
        let pvs = watcher::watcher(
            Api::<PersistentVolume>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed();
        let mut pvcs = pvcs;
        let mut pvs = pvs;
        loop {
            tokio::select! {
                Some(pvc) = pvcs.next() => match pvc {
                    Ok(pvc) => {
                        // Several at once; two events of one claim racing end in a 409.
                        let slot = slots.clone().acquire_owned().await?;
                        let me = self.clone();
                        tokio::spawn(async move {
                            // A claim is retried after a failure (an API server busy or
                            // restarting): no other event may ever come for it, and a claim
                            // left without a volume keeps its pod Pending for good.
                            for attempt in 0..CLAIM_ATTEMPTS {
                                match me.on_claim(&pvc).await {
                                    Ok(()) => break,
                                    Err(e) => {
                                        warn!("PVC {} (attempt {}): {e:#}", pvc.name_any(), attempt + 1);
                                        tokio::time::sleep(std::time::Duration::from_millis(250 << attempt.min(4))).await;
                                    }
                                }
                            }
                            drop(slot);
                        });
                    }
                    Err(e) => warn!("PVC watch: {e}"),
                },
                Some(ev) = pvs.next() => match ev {
                    Ok(Event::Apply(pv)) | Ok(Event::InitApply(pv)) => {
                        if let Err(e) = self.on_volume(&pv).await { warn!("PV {}: {e:#}", pv.name_any()) }
                    }
                    Ok(_) => {}
                    Err(e) => warn!("PV watch: {e}"),
                },
                else => return Ok(()),
            }
        }
    }

    async fn ours(&self, class: Option<&str>) -> anyhow::Result<bool> {
        let Some(class) = class else { return Ok(false) };
        if let Some(ours) = self
            .classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(class)
        {
            return Ok(*ours);
        }
        let Some(sc) = Api::<StorageClass>::all(self.client.clone())
            .get_opt(class)
            .await?
        else {
            return Ok(false); // not created yet: asked again next time
        };
        let ours = sc.provisioner == PROVISIONER;
        self.classes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(class.to_string(), ours);
        Ok(ours)
    }

    async fn on_claim(&self, pvc: &PersistentVolumeClaim) -> anyhow::Result<()> {
        let Some(spec) = &pvc.spec else { return Ok(()) };
        if pvc.metadata.deletion_timestamp.is_some()
            || !self.ours(spec.storage_class_name.as_deref()).await?
        {
            return Ok(());
        }
        let request = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .cloned()
            .unwrap_or_else(|| Quantity("1Gi".into()));
        let pv_api = Api::<PersistentVolume>::all(self.client.clone());
        match spec.volume_name.as_deref() {
            None => {
                let uid = pvc.uid().unwrap_or_default();
                let name = format!("pvc-{uid}");
                let dir = self.volumes_dir.join(&uid);
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                    "spec": {
                        "capacity": {"storage": request.0},
                        "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                        "persistentVolumeReclaimPolicy": "Delete",
                        "storageClassName": spec.storage_class_name,
                        "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                        "hostPath": {"path": dir.display().to_string(), "type": "DirectoryOrCreate"},
                        "claimRef": {
                            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "namespace": pvc.namespace(), "name": pvc.name_any(), "uid": uid,
                        },
                    }
                }))?;
                match pv_api.create(&PostParams::default(), &pv).await {
                    Ok(_) => {
                        info!(pvc = %pvc.name_any(), pv = %name, size = %request.0, "provisioned")
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e).context("creating PV"),
                }
            }
            Some(pv_name) => {
                // Expansion: the claim asks for more than its volume has.
                let have = pvc
                    .status
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref())
                    .and_then(|c| c.get("storage"));
                let grow = match (
                    quantity_bytes(&request.0),
                    have.and_then(|q| quantity_bytes(&q.0)),
                ) {
                    (Some(want), Some(have)) => want > have,
                    _ => false,
                };
                if grow {
                    let pp = PatchParams::default();
                    pv_api
                        .patch(
                            pv_name,
                            &pp,
                            &Patch::Merge(json!({"spec": {"capacity": {"storage": request.0}}})),
                        )
                        .await?;
                    let claims: Api<PersistentVolumeClaim> =
                        Api::namespaced(self.client.clone(), &pvc.namespace().unwrap_or_default());
                    claims
                        .patch_status(
                            &pvc.name_any(),
                            &pp,
                            &Patch::Merge(json!({"status": {"capacity": {"storage": request.0}}})),
                        )
                        .await?;
                    info!(pvc = %pvc.name_any(), size = %request.0, "expanded");
                }
            }
        }
        Ok(())
    }

    async fn on_volume(&self, pv: &PersistentVolume) -> anyhow::Result<()> {
        let ours = pv
            .annotations()
            .get("pv.kubernetes.io/provisioned-by")
            .is_some_and(|p| p == PROVISIONER);
        let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let delete = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete");
        if !(ours && released && delete) {
            return Ok(());
        }
        if let Some(path) = pv
            .spec
            .as_ref()
            .and_then(|s| s.host_path.as_ref())
            .map(|h| PathBuf::from(&h.path))
            && path.starts_with(&self.volumes_dir)
        {
            let _ = std::fs::remove_dir_all(&path);
        }
        match Api::<PersistentVolume>::all(self.client.clone())
            .delete(&pv.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => info!(pv = %pv.name_any(), "deleted released volume"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}
