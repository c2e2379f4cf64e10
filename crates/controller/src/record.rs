//! Record: the status write that precedes every action of a pass.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use marekvs_api::conditions::{READY, REASON_INVALID_SPEC, REASON_NAME_TAKEN, set_condition};
use marekvs_api::{MarekvsCluster, MarekvsClusterStatus};
use serde_json::json;
use tracing::warn;

use crate::build::{LABEL_INSTANCE, MANAGER};
use crate::ctx::Ctx;
use crate::error::Error;

/// Write `status`, conditional on the resourceVersion the decision was based on: a decision
/// made on a stale copy (the watch cache lags our own last write) conflicts (409) instead of
/// overwriting newer status, and nothing is acted on.
pub async fn write_status(
    client: &Client,
    cr: &MarekvsCluster,
    status: &MarekvsClusterStatus,
) -> Result<(), Error> {
    let api: Api<MarekvsCluster> =
        Api::namespaced(client.clone(), &cr.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": "marekvs.io/v1alpha1", "kind": "MarekvsCluster",
        "metadata": {"resourceVersion": cr.resource_version()},
        "status": status,
    });
    let applied = api
        .patch_status(
            &cr.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await;
    if let Err(source) = applied {
        if stored_status_untyped(&source) {
            clear_foreign_status(&api, cr).await;
        }
        return Err(Error::Record {
            name: cr.name_any(),
            source,
        });
    }
    Ok(())
}

/// The API server cannot apply to the object because its stored status holds a value of
/// another type than the schema's (marekvs's own operator wrote `opsPerSecond: "4231.0"`):
/// server-side apply then fails with a 500 before looking at what we send.
fn stored_status_untyped(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(r) if r.code == 500 && r.message.contains("smd typed"))
}

/// Remove a status this operator cannot have written (it cannot be typed), so that the next
/// pass writes its own. A merge patch, which the API server accepts on such an object,
/// conditional on the resourceVersion read; nothing of this operator's is lost (its own status
/// is always typed).
async fn clear_foreign_status(api: &Api<MarekvsCluster>, cr: &MarekvsCluster) {
    let patch = json!({"metadata": {"resourceVersion": cr.resource_version()}, "status": null});
    match api
        .patch_status(
            &cr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => warn!(
            cluster = %cr.name_any(),
            "the stored status was not this operator's (a value of another type than the schema's, e.g. marekvs's own operator's opsPerSecond): cleared, to be written anew"
        ),
        Err(e) => warn!(cluster = %cr.name_any(), "clearing a foreign status: {e}"),
    }
}

/// Record the gossip cluster name of a cluster that has none recorded (`marekvs_core::gossip`):
/// its own, unless it has members, pods or volumes already (they ran with the server's
/// default). Pods and volumes not yet labelled for this operator count too (read past the
/// watch caches): a StatefulSet's orphans are labelled only after the operator first sees the
/// object ([migration](../../docs/migration.md)).
pub async fn gossip_cluster(ctx: &Ctx, cr: &MarekvsCluster, has_pods: bool) -> Result<(), Error> {
    let mut status = cr.status.clone().unwrap_or_default();
    let has_pods = has_pods || ran_before(ctx, cr).await?;
    let has_members = !status.instance_names.is_empty();
    let ns = cr.namespace().unwrap_or_default();
    let name = marekvs_core::gossip::first_name(&ns, &cr.name_any(), has_members, has_pods);
    status.gossip_cluster = Some(name);
    write_status(&ctx.client, cr, &status).await
}

/// Whether a pod `<name>-*` or a PVC `data-<name>-*` labelled with the cluster's instance
/// exists, whoever manages it.
async fn ran_before(ctx: &Ctx, cr: &MarekvsCluster) -> Result<bool, Error> {
    let (ns, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    let lp = ListParams::default().labels(&format!("{LABEL_INSTANCE}={name}"));
    let observe = |what: &str| {
        let what = format!("the {what} of {ns}/{name} (gossip cluster name)");
        move |source| Error::Observe { what, source }
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = pods.list_metadata(&lp).await.map_err(observe("pods"))?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let pvcs = pvcs.list_metadata(&lp).await.map_err(observe("volumes"))?;
    let member = format!("{name}-");
    let volume = format!("data-{name}-");
    Ok(pods.items.iter().any(|p| p.name_any().starts_with(&member))
        || pvcs.items.iter().any(|p| p.name_any().starts_with(&volume)))
}

/// A spec the operator cannot act on: say so in the Ready condition, and touch nothing else.
pub async fn invalid_spec(ctx: &Ctx, cr: &MarekvsCluster, why: &str) -> Result<(), Error> {
    let message = format!("the spec cannot be acted on: {why}; waiting for it to change");
    not_ready(ctx, cr, REASON_INVALID_SPEC, &message).await
}

/// A Service or the PDB of the cluster's name is another object's (`Error::NameTaken`): say so
/// in the Ready condition, touch nothing else.
pub async fn name_taken(ctx: &Ctx, cr: &MarekvsCluster, why: &Error) -> Result<(), Error> {
    let message = format!("nothing is created or changed: {why}");
    not_ready(ctx, cr, REASON_NAME_TAKEN, &message).await
}

/// `Ready=False` with `reason` and `message`, the rest of the status as it was; written only
/// when it changed.
async fn not_ready(
    ctx: &Ctx,
    cr: &MarekvsCluster,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let mut status = cr.status.clone().unwrap_or_default();
    let now = crate::status::to_time(crate::ctx::now_ms());
    set_condition(
        &mut status.conditions,
        READY,
        false,
        reason,
        message,
        &now,
        cr.metadata.generation,
    );
    if cr.status.as_ref() == Some(&status) {
        return Ok(());
    }
    // The operator looked, and waits for the spec (or the name) to change.
    status.last_pass_time = Some(now);
    status.operator_version = Some(crate::VERSION.to_string());
    write_status(&ctx.client, cr, &status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(json!({"status": "Failure", "message": message,
                "reason": "", "code": code}))
            .unwrap(),
        )
    }

    /// The error the API server (v1.34) answered an apply to an object whose stored status
    /// marekvs's own operator wrote, as the migration e2e test met it.
    #[test]
    fn an_untyped_stored_status_is_told_from_other_errors() {
        let seen = "failed to create manager for existing fields: failed to convert new object (e2e-migr-3aa7e7f1/demo; marekvs.io/v1alpha1, Kind=MarekvsCluster) to smd typed: .status.opsPerSecond: expected numeric (int or float), got string";
        assert!(stored_status_untyped(&api_error(500, seen)));
        assert!(!stored_status_untyped(&api_error(
            500,
            "etcdserver: request timed out"
        )));
        assert!(!stored_status_untyped(&api_error(
            409,
            "the object has been modified"
        )));
        assert!(!stored_status_untyped(&api_error(422, seen)));
    }
}
