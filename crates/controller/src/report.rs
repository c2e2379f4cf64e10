//! Report: Events, on transitions only, each naming its member where it is about one.

use k8s_openapi::api::core::v1::ObjectReference;
use marekvs_core::{EventKind, Note};
use tracing::{info, warn};

use crate::events::{self, member_named};
use crate::reconcile::Ctx;

/// The notes as Events, except those `skip` says another path announced.
pub async fn publish_notes(
    ctx: &Ctx,
    reference: &ObjectReference,
    notes: &[Note],
    skip: impl Fn(&Note) -> bool,
) {
    for note in notes.iter().filter(|n| !skip(n)) {
        let member = note
            .member
            .or_else(|| member_named(cluster(reference), &note.message));
        publish_about(
            ctx,
            reference,
            member,
            note.kind,
            note.reason,
            &note.message,
        )
        .await;
    }
}

fn cluster(reference: &ObjectReference) -> &str {
    reference.name.as_deref().unwrap_or_default()
}

/// Publish an Event about the cluster; one about a single member (the note names it) carries
/// that member's pod as `related`.
pub async fn publish(
    ctx: &Ctx,
    reference: &ObjectReference,
    kind: EventKind,
    reason: &str,
    message: &str,
) {
    let member = member_named(cluster(reference), message);
    publish_about(ctx, reference, member, kind, reason, message).await;
}

async fn publish_about(
    ctx: &Ctx,
    reference: &ObjectReference,
    member: Option<u32>,
    kind: EventKind,
    reason: &str,
    message: &str,
) {
    let related = member.map(|o| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: reference.namespace.clone(),
        name: Some(format!("{}-{o}", cluster(reference))),
        ..Default::default()
    });
    info!(reason, message, "event");
    let note = events::Note {
        kind,
        reason,
        message,
        related,
    };
    if let Err(e) = ctx.events.publish(reference, note).await {
        warn!("publishing event {reason}: {e}");
    }
}
