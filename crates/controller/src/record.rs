//! Record: the status write that precedes every action of a pass.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use marekvs_api::conditions::{READY, REASON_INVALID_SPEC, set_condition};
use marekvs_api::{MarekvsCluster, MarekvsClusterStatus};
use serde_json::json;

use crate::build::MANAGER;
use crate::error::Error;
use crate::reconcile::Ctx;

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
    api.patch_status(
        &cr.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|source| Error::Record {
        name: cr.name_any(),
        source,
    })?;
    Ok(())
}

/// A spec the operator cannot act on: say so in the Ready condition, and touch nothing else.
pub async fn invalid_spec(ctx: &Ctx, cr: &MarekvsCluster, why: &str) -> Result<(), Error> {
    let mut status = cr.status.clone().unwrap_or_default();
    let now = crate::status::to_time(crate::reconcile::now_ms());
    let message = format!("the spec cannot be acted on: {why}; waiting for it to change");
    set_condition(
        &mut status.conditions,
        READY,
        false,
        REASON_INVALID_SPEC,
        &message,
        &now,
        cr.metadata.generation,
    );
    if cr.status.as_ref() == Some(&status) {
        return Ok(());
    }
    write_status(&ctx.client, cr, &status).await
}
