//! Report: Events, on transitions only, each naming its member where it is about one.

use k8s_openapi::api::core::v1::ObjectReference;
use marekvs_core::{EventKind, EventReason, Note};
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::events::{self, member_named};

/// The notes as Events, except those `skip` says another path announced.
pub async fn publish_notes(
    ctx: &Ctx,
    reference: &ObjectReference,
    notes: &[Note],
    skip: impl Fn(&Note) -> bool,
) {
    for note in notes.iter().filter(|n| !skip(n)) {
        let member = about_member(cluster(reference), note);
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

/// The member a note is about (its pod is the Event's `related`): the one the core says, or
/// the single member its message names. A note naming several (a hold on repairs moving on
/// demo-0 and demo-2) is about the cluster alone.
pub fn about_member(cluster: &str, note: &Note) -> Option<u32> {
    note.member.or_else(|| member_named(cluster, &note.message))
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
    reason: EventReason,
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
    reason: EventReason,
    message: &str,
) {
    let reason = reason.as_str();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reason: EventReason, message: &str, member: Option<u32>) -> Note {
        Note {
            kind: EventKind::Normal,
            reason,
            message: message.into(),
            member,
        }
    }

    /// A hold naming several members is published about the cluster only; one naming the
    /// leaver alone (or said by the core to be about it) relates to that member's pod.
    #[test]
    fn a_hold_naming_several_members_relates_to_none_of_them() {
        let several = note(
            EventReason::HandoffHeld,
            "removal of demo-3 held: Repairs moving on demo-0, demo-2 at 12.5/s since 2026-11-25T17:00:00Z",
            None,
        );
        assert_eq!(about_member("demo", &several), None);
        let leaver = note(
            EventReason::HandoffHeld,
            "removal of demo-3 held: ReplicationRing moving on demo-3, backlog 1200 ops",
            None,
        );
        assert_eq!(about_member("demo", &leaver), Some(3));
        let said = note(EventReason::HandoffStuck, &several.message, Some(3));
        assert_eq!(about_member("demo", &said), Some(3));
    }
}
