//! Report: Events, on transitions only, each naming its member where it is about one.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use marekvs_core::{EventKind, Note};
use tracing::{info, warn};

use crate::reconcile::Ctx;

/// The notes as Events, except those `skip` says another path announced.
pub async fn publish_notes(
    ctx: &Ctx,
    reference: &ObjectReference,
    notes: &[Note],
    skip: impl Fn(&Note) -> bool,
) {
    for note in notes.iter().filter(|n| !skip(n)) {
        publish(ctx, reference, note.kind, note.reason, &note.message).await;
    }
}

pub async fn publish(
    ctx: &Ctx,
    reference: &ObjectReference,
    kind: EventKind,
    reason: &str,
    message: &str,
) {
    let ev = Event {
        type_: match kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        },
        reason: reason.into(),
        note: Some(message.chars().take(1000).collect()),
        action: reason.into(),
        secondary: None,
    };
    info!(reason, message, "event");
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        warn!("publishing event {reason}: {e}");
    }
}
