//! The reconcile pipeline: validate → observe → decide (one call into the pure core) →
//! record → report → act.
//!
//! Level-triggered and idempotent: every pass re-reads the pods, PVCs and member metrics, and
//! the only memory is the object's status (members, the removal record, counter samples). The
//! decision's memory is written to status before any of the decision's actions, so an
//! operator restarted at any point re-derives the same next step. Each stage lives in its own
//! module:
//!
//! | stage | module |
//! |---|---|
//! | validate the spec | `spec` |
//! | observe caches and scrapes | `observe`, `scrape`, `views` |
//! | decide | `marekvs_core::pass::plan`: sizing, stepper, notes, absences, next look |
//! | record (status) | `status` (translate the plan), `record` (write) |
//! | report (Events) | `report` |
//! | act (API writes) | `act` |
//!
//! Five writes come before record, each for a reason of its own:
//!
//! 1. `act::apply_children`: the Services and the PDB do not depend on the runbook, and pods
//!    made before the client-traffic label existed are labelled "on" before the client
//!    Service selects by it (it never selects fewer members than it did).
//! 2. `adopt::orphans`: a StatefulSet's orphans become members (opt-in); the pass then starts
//!    over, so nothing is decided on the look-alikes they were.
//! 3. `record::gossip_cluster`: every pod is built with the gossip name, so it is in status
//!    before the first pod, in a write of its own.
//! 4. `act::stamp_volumes`: a volume this cluster restamps gets its uid as soon as it is
//!    seen, whatever the decision (a failure is retried; until then it still counts as ours).
//! 5. `recreate::before_scrapes`: a deleted pod whose re-creation the core allows without
//!    figures (`marekvs_core::recreate`) is made before the slow scrapes; the decision's
//!    actions skip it.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use marekvs_api::MarekvsCluster;
use marekvs_core::pass::PassInput;
use tracing::warn;

pub use crate::ctx::{Ctx, now_ms};
use crate::error::Error;
use crate::observe::{Children, ledger_reads, read_members, synced, unscraped, with_reads};
use crate::status::{StatusInput, for_comparison, memory_from_status, reported, status_from};
use crate::{act, adopt, record, recreate, report, spec, status};

/// How soon a cluster whose Service or PDB name another object holds is looked at again.
pub const NAME_TAKEN_LOOK_AGAIN: Duration = Duration::from_secs(30);

/// What the controller does after a pass.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    LookAgainIn(Duration),
    /// Nothing to do until the object changes (it is being deleted, or its spec is invalid).
    AwaitChange,
}

pub async fn reconcile(cr: Arc<MarekvsCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let (ns, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    ctx.metrics.started(&ns, &name);
    let start = std::time::Instant::now();
    let result = pass(&cr, &ctx).await;
    ctx.metrics.reconcile_duration.observe(start.elapsed());
    ctx.metrics
        .reconciles
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cluster = (ns, name);
    match &result {
        Ok(next) => {
            ctx.failures.succeeded(&cluster);
            let after = match next {
                Next::LookAgainIn(after) => Some(*after),
                Next::AwaitChange => None,
            };
            ctx.metrics.scheduled(&cluster.0, &cluster.1, after);
        }
        Err(e) => {
            ctx.failures.failed(&cluster, e);
            ctx.metrics.errors.inc(e.kind());
        }
    }
    result.map(|next| match next {
        Next::LookAgainIn(after) => Action::requeue(after),
        Next::AwaitChange => Action::await_change(),
    })
}

/// One pass over `cr`, without the bookkeeping of [`reconcile`] (public for the request-order
/// tests).
pub async fn pass(cr: &MarekvsCluster, ctx: &Ctx) -> Result<Next, Error> {
    if cr.metadata.deletion_timestamp.is_some() {
        // Pods and Services go with it (owner references); PVCs stay on purpose.
        return Ok(Next::AwaitChange);
    }
    // Validate.
    let spec = match spec::cluster_spec(cr) {
        Ok(spec) => spec,
        Err(Error::InvalidSpec(why)) => {
            record::invalid_spec(ctx, cr, &why).await?;
            return Ok(Next::AwaitChange);
        }
        Err(e) => return Err(e),
    };
    let (ns, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    if !(synced(&ctx.pods) && synced(&ctx.pvcs) && synced(&ctx.services) && synced(&ctx.pdbs)) {
        return Err(Error::NotSynced);
    }
    // A deleted pod being re-created goes first: its POST is what a user waits for.
    ctx.recreation.wait(&ns, &name).await;
    match act::apply_children(ctx, cr).await {
        Ok(()) => {}
        Err(e @ Error::NameTaken { .. }) => {
            // Another object holds a name this cluster derives: nothing of the cluster is made
            // or changed until it goes (its owner is not ours to watch: look again).
            record::name_taken(ctx, cr, &e).await?;
            return Ok(Next::LookAgainIn(NAME_TAKEN_LOOK_AGAIN));
        }
        Err(e) => return Err(e),
    }

    // Observe; a missing child of an unchanged membership is re-created before the scrapes.
    let children = Children::of(cr, &ctx.pods, &ctx.pvcs);
    if adopt::orphans(ctx, cr, &children).await > 0 {
        // Decide nothing on the look-alikes they were: the next pass sees them as members.
        return Ok(Next::LookAgainIn(Duration::from_millis(200)));
    }
    // Name the gossip cluster before any pod is built with it, in a write of its own.
    if cr
        .status
        .as_ref()
        .and_then(|s| s.gossip_cluster.as_ref())
        .is_none()
    {
        record::gossip_cluster(ctx, cr, !children.pods.is_empty()).await?;
        return Ok(Next::LookAgainIn(Duration::from_millis(200)));
    }
    act::stamp_volumes(ctx, cr, &children).await;
    let prev = cr.status.clone().unwrap_or_default();
    let memory = memory_from_status(&name, &prev);
    let unscraped = unscraped(
        cr,
        &ctx.cluster_domain,
        &memory,
        &children,
        &ctx.admissions,
        &ctx.nodes,
    )?;
    let recreated =
        recreate::before_scrapes(ctx, cr, &spec, &prev, &memory, &unscraped, &children).await?;
    // Each member's view by identity over RESP, then its figures; client input from the
    // ledger (its own reads taken off).
    let credentials = ctx.passwords.get(&ctx.client, cr).await;
    let reads = read_members(&ctx.members, &children.pods, &credentials).await;
    let cluster = (ns.clone(), name.clone());
    let now = now_ms();
    let inputs = ctx
        .inputs
        .observe(&cluster, &ledger_reads(&children.pods, &reads), now);
    let observed = with_reads(unscraped, &reads, &inputs);

    // Decide: the core's one call, with everything the shell records, reports and carries out.
    let policy = cr.spec.autoscale.as_ref().map(spec::autoscale_policy);
    let plan = marekvs_core::pass::plan(&PassInput {
        spec: &spec,
        policy: policy.as_ref(),
        memory: &memory,
        observed: &observed,
        load: &status::load_from_status(&name, &prev),
        scale: &status::scale_from_status(&prev),
        reported: &reported(&prev),
        removal_choices: &spec::removal_choices(cr),
        look_alikes: &children.look_alikes_seen(&name),
        password: credentials.record(),
        now,
    });
    let password = crate::password::status(cr, &credentials);
    let next = status_from(&StatusInput::of(
        cr, &prev, &plan, &observed, &children, password, now,
    ));

    // Record, before acting: written when it changed, or once a minute to say the pass ran
    // (`status.lastPassTime`); otherwise a quiet cluster costs no write.
    let unchanged = for_comparison(&next) == for_comparison(&prev);
    let last_pass = prev.last_pass_time.as_ref().map(status::from_time);
    if unchanged && !marekvs_core::pace::heartbeat_due(last_pass, now) {
        ctx.metrics.actions.inc("status_unchanged");
    } else {
        // A pass that began before a pod's deletion lets its re-creation go first here.
        ctx.recreation.wait(&ns, &name).await;
        record::write_status(&ctx.client, cr, &next).await?;
        let why = if unchanged {
            "status_heartbeat"
        } else {
            "status_write"
        };
        ctx.metrics.actions.inc(why);
    }
    ctx.inputs.recorded(&cluster);

    // Report, then act (what was re-created before the scrapes is not sent again).
    let reference = cr.object_ref(&());
    report::publish_notes(ctx, &reference, &plan.changes, |_| false).await;
    report::publish_notes(ctx, &reference, &plan.decision.notes, |n| {
        recreated.made_elsewhere(n)
    })
    .await;
    act::run_actions(
        ctx,
        cr,
        &recreated.still_to_do(&plan.decision.actions),
        &children,
    )
    .await?;
    crate::password::carry_out(
        ctx,
        cr,
        &plan.password,
        &children.pods,
        &reads,
        &credentials,
    )
    .await;
    act::grow_volumes(ctx, cr, &children.pvcs).await;
    act::record_absences(ctx, cr, &plan.absences, &children.pvcs, now).await;
    Ok(Next::LookAgainIn(Duration::from_millis(
        plan.next_look_ms as u64,
    )))
}

pub fn error_policy(cr: Arc<MarekvsCluster>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let cluster = (cr.namespace().unwrap_or_default(), cr.name_any());
    let failures = ctx.failures.in_a_row(&cluster);
    let after = crate::retry::retry_after(err, failures, crate::retry::jitter(&cluster, failures));
    if !matches!(err, Error::NotSynced) && err.code() != Some(409) {
        warn!(failures, retry_in = ?after, "reconcile failed: {err}");
    }
    Action::requeue(after)
}
