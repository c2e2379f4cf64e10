//! What each command writes, behind its guards: a merge patch of the `MarekvsCluster` (the
//! list edits carry the resourceVersion read, so a concurrent change is refused by the API
//! server, not overwritten), or an annotation on a member's pod. A refusal says why and what
//! to do instead.

use std::fmt;

use marekvs_api::MarekvsCluster;
use serde_json::{Value, json};

/// On a member's pod: move it to a fresh, empty volume, safely (docs/replacing-members.md).
pub const ANNOTATION_REPLACE_VOLUME: &str = "marekvs.io/replace-volume";
/// On a member's pod: restart it on its own volume, safely (drained and handed off first).
pub const ANNOTATION_RESTART: &str = "marekvs.io/restart";

/// A command the plugin will not carry out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// A merge patch and the one line that says what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub patch: Value,
    pub done: String,
}

fn name(cr: &MarekvsCluster) -> &str {
    cr.metadata.name.as_deref().unwrap_or("?")
}

fn members(cr: &MarekvsCluster) -> Vec<String> {
    cr.status
        .as_ref()
        .map(|s| s.instance_names.clone())
        .unwrap_or_default()
}

/// Refuse a name that is not in `status.instanceNames`.
fn known_member(cr: &MarekvsCluster, member: &str) -> Result<(), Refused> {
    let members = members(cr);
    if members.iter().any(|m| m == member) {
        return Ok(());
    }
    Err(Refused(format!(
        "{member} is not a member of {} (members: {})",
        name(cr),
        if members.is_empty() {
            "none yet".into()
        } else {
            members.join(", ")
        }
    )))
}

/// A spec patch conditional on the resourceVersion read.
fn guarded(cr: &MarekvsCluster, spec: Value) -> Value {
    json!({"metadata": {"resourceVersion": cr.metadata.resource_version}, "spec": spec})
}

/// `remove`: one member fewer, this one: `spec.nodes - 1` and the member in
/// `spec.removeMembers`, in one patch.
pub fn remove(cr: &MarekvsCluster, member: &str) -> Result<Edit, Refused> {
    known_member(cr, member)?;
    let cluster = name(cr);
    if cr.spec.autoscale.is_some() {
        return Err(Refused(format!(
            "{cluster} has spec.autoscale: the autoscaler owns the member count. To have {member} leave at its next scale-down, list it in spec.removeMembers \
             (kubectl patch mkv {cluster} --type merge -p '{{\"spec\":{{\"removeMembers\":[\"{member}\"]}}}}'); to remove a member now, lower spec.autoscale.maxNodes"
        )));
    }
    let status = cr.status.clone().unwrap_or_default();
    if let Some(r) = &status.removal {
        return Err(Refused(format!(
            "{} is being removed (step {:?}): one member at a time; wait until it is gone (kubectl mkv plan {cluster})",
            r.member, r.step
        )));
    }
    let count = status.instance_names.len() as i32;
    if cr.spec.nodes != count {
        return Err(Refused(format!(
            "spec.nodes is {} but {cluster} has {count} members: a change of size is in progress; wait until it settles (kubectl mkv plan {cluster})",
            cr.spec.nodes
        )));
    }
    let floor = cr.spec.replication_factor + 1;
    if count - 1 < floor {
        return Err(Refused(format!(
            "removing {member} would leave {} members, below replicationFactor + 1 = {floor}",
            count - 1
        )));
    }
    let mut listed = cr.spec.remove_members.clone();
    if !listed.iter().any(|m| m == member) {
        listed.push(member.to_string());
    }
    Ok(Edit {
        patch: guarded(cr, json!({"nodes": count - 1, "removeMembers": listed})),
        done: format!(
            "{cluster}: removing {member} (spec.nodes {count} → {}, {member} in spec.removeMembers); follow it with kubectl mkv plan {cluster}",
            count - 1
        ),
    })
}

/// `fence` (`on`) / `unfence`: the member in or out of `spec.fencedMembers`. `None`: nothing
/// to change.
pub fn fence(cr: &MarekvsCluster, member: &str, on: bool) -> Result<Option<Edit>, Refused> {
    let cluster = name(cr);
    let mut fenced = cr.spec.fenced_members.clone();
    let listed = fenced.iter().any(|m| m == member);
    if on {
        known_member(cr, member)?;
        if listed {
            return Ok(None);
        }
        fenced.push(member.to_string());
        let copies = cr.spec.replication_factor as usize;
        if fenced.len() >= copies && !cr.spec.fenced_members_acknowledged {
            return Err(Refused(format!(
                "fencing {member} too would fence {} members of {cluster} ({}), as many as its replicationFactor {copies}: their pods would all stop at once, without drain, and partitions held only by them would be unavailable until they are unfenced. Fence fewer, or set spec.fencedMembersAcknowledged: true first",
                fenced.len(),
                fenced.join(", ")
            )));
        }
    } else {
        if !listed {
            return Err(Refused(format!(
                "{member} is not fenced in {cluster} (spec.fencedMembers: [{}])",
                fenced.join(", ")
            )));
        }
        fenced.retain(|m| m != member);
    }
    let done = if on {
        format!(
            "{cluster}: fenced {member} (its pod is stopped, its volume and membership kept; every disruptive step waits)"
        )
    } else {
        format!("{cluster}: unfenced {member} (it comes back on its own volume)")
    };
    Ok(Some(Edit {
        patch: guarded(cr, json!({"fencedMembers": fenced})),
        done,
    }))
}

/// `pause` (`on`) / `resume`: `spec.paused`.
pub fn pause(cr: &MarekvsCluster, on: bool) -> Edit {
    let cluster = name(cr);
    Edit {
        patch: json!({"spec": {"paused": on}}),
        done: if on {
            format!(
                "{cluster}: paused (spec.paused: true): no member is drained, restarted or removed until kubectl mkv resume {cluster}"
            )
        } else {
            format!("{cluster}: resumed (spec.paused: false)")
        },
    }
}

/// How `wake` treats volumes that slept past the grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Wake on the members' own volumes (refused by the operator past the grace).
    OwnVolumes,
    /// `--fresh-volumes` without `--yes-lose-data`: refused here.
    FreshVolumesUnconfirmed,
    /// `--fresh-volumes --yes-lose-data`.
    FreshVolumesConfirmed,
}

/// `hibernate`: `spec.hibernation: true`.
pub fn hibernate(cr: &MarekvsCluster) -> Edit {
    let cluster = name(cr);
    Edit {
        patch: json!({"spec": {"hibernation": true}}),
        done: format!(
            "{cluster}: hibernating (spec.hibernation: true): every member's pod stops, volumes and membership kept; kubectl mkv wake {cluster} brings them back"
        ),
    }
}

/// `wake`: `spec.hibernation: false`, and with `--fresh-volumes --yes-lose-data`
/// `spec.storage.freshVolumesOnWake: true`.
pub fn wake(cr: &MarekvsCluster, how: Wake) -> Result<Edit, Refused> {
    let cluster = name(cr);
    let grace = cr.spec.storage.stale_volume_grace_seconds;
    match how {
        Wake::OwnVolumes => Ok(Edit {
            patch: json!({"spec": {"hibernation": false}}),
            done: format!(
                "{cluster}: waking (spec.hibernation: false) on the members' own volumes"
            ),
        }),
        Wake::FreshVolumesUnconfirmed => Err(Refused(format!(
            "--fresh-volumes starts every member of {cluster} on an empty volume if it slept longer than storage.staleVolumeGraceSeconds ({grace} s): all its data is lost. \
             Add --yes-lose-data to confirm, or wake without --fresh-volumes"
        ))),
        Wake::FreshVolumesConfirmed => Ok(Edit {
            patch: json!({"spec": {"hibernation": false, "storage": {"freshVolumesOnWake": true}}}),
            done: format!(
                "{cluster}: waking (spec.hibernation: false, storage.freshVolumesOnWake: true): past the grace of {grace} s every member starts on an empty volume"
            ),
        }),
    }
}

/// The member's pod as read: whether it exists and is not going away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    Missing,
    Terminating,
    Running,
}

/// `replace`: annotate the member's pod. `fresh_volume`: it moves to a fresh, empty volume
/// (`marekvs.io/replace-volume`); otherwise it restarts on its own (`marekvs.io/restart`).
/// Either way the operator drains it and waits for the hand-off gate before deleting its pod.
pub fn replace(
    cr: &MarekvsCluster,
    member: &str,
    fresh_volume: bool,
    pod: PodState,
) -> Result<Edit, Refused> {
    known_member(cr, member)?;
    let cluster = name(cr);
    match pod {
        PodState::Missing => {
            return Err(Refused(format!(
                "{member} has no pod: the operator is re-creating it already (kubectl mkv status {cluster}); ask again once it runs"
            )));
        }
        PodState::Terminating => {
            return Err(Refused(format!(
                "the pod of {member} is already going away; ask again once its new pod runs"
            )));
        }
        PodState::Running => {}
    }
    let (annotation, what) = if fresh_volume {
        (ANNOTATION_REPLACE_VOLUME, "move to a fresh, empty volume")
    } else {
        (ANNOTATION_RESTART, "restart on its own volume")
    };
    let mut done = format!(
        "{cluster}: {member} will {what} once drained and its data handed off ({annotation}=true on pod {member}); follow it with kubectl mkv plan {cluster}"
    );
    if cr.spec.paused {
        done.push_str(&format!(
            " (held while paused: kubectl mkv resume {cluster})"
        ));
    }
    Ok(Edit {
        patch: json!({"metadata": {"annotations": {annotation: "true"}}}),
        done,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::cluster;

    fn refusal<T: fmt::Debug>(r: Result<T, Refused>) -> String {
        r.expect_err("refused").0
    }

    #[test]
    fn remove_lowers_nodes_and_names_the_member_in_one_guarded_patch() {
        let cr = cluster(json!({"nodes": 3, "replicationFactor": 1, "removeMembers": ["demo-9"]}));
        let e = remove(&cr, "demo-1").unwrap();
        assert_eq!(
            e.patch,
            json!({"metadata": {"resourceVersion": "42"},
                   "spec": {"nodes": 2, "removeMembers": ["demo-9", "demo-1"]}})
        );
        assert!(
            e.done
                .starts_with("demo: removing demo-1 (spec.nodes 3 → 2"),
            "{}",
            e.done
        );
        // Already listed: not twice.
        let cr = cluster(json!({"nodes": 3, "replicationFactor": 1, "removeMembers": ["demo-1"]}));
        assert_eq!(
            remove(&cr, "demo-1").unwrap().patch["spec"]["removeMembers"],
            json!(["demo-1"])
        );
    }

    #[test]
    fn remove_refuses_what_the_runbook_forbids() {
        // Not a member.
        let cr = cluster(json!({"nodes": 3, "replicationFactor": 1}));
        let r = refusal(remove(&cr, "demo-7"));
        assert!(
            r.contains("demo-7 is not a member of demo (members: demo-0, demo-1, demo-2)"),
            "{r}"
        );
        // Below replicationFactor + 1.
        let cr = cluster(json!({"nodes": 3, "replicationFactor": 2}));
        let r = refusal(remove(&cr, "demo-1"));
        assert!(
            r.contains("would leave 2 members, below replicationFactor + 1 = 3"),
            "{r}"
        );
        // The autoscaler owns the count: says what to do instead.
        let cr = cluster(json!({"nodes": 3, "replicationFactor": 1,
            "autoscale": {"minNodes": 2, "maxNodes": 5, "targetOpsPerNode": 100}}));
        let r = refusal(remove(&cr, "demo-1"));
        assert!(
            r.contains("autoscaler owns the member count")
                && r.contains("removeMembers")
                && r.contains("maxNodes"),
            "{r}"
        );
        // A removal in progress.
        let mut cr = cluster(json!({"nodes": 3, "replicationFactor": 1}));
        cr.status.as_mut().unwrap().removal = Some(
            serde_json::from_value(json!({
            "member": "demo-2", "ordinal": 2, "reason": "HighestOrdinal", "step": "HandingOff",
            "startedAt": "2026-11-25T09:00:00Z", "stepStartedAt": "2026-11-25T09:00:00Z"}))
            .unwrap(),
        );
        let r = refusal(remove(&cr, "demo-1"));
        assert!(
            r.contains("demo-2 is being removed (step HandingOff)"),
            "{r}"
        );
        // A size change not yet carried out.
        let cr = cluster(json!({"nodes": 2, "replicationFactor": 1}));
        let r = refusal(remove(&cr, "demo-1"));
        assert!(r.contains("spec.nodes is 2 but demo has 3 members"), "{r}");
    }

    #[test]
    fn fencing_as_many_members_as_copies_needs_the_acknowledgement() {
        let cr = cluster(json!({"replicationFactor": 2, "fencedMembers": ["demo-0"]}));
        let r = refusal(fence(&cr, "demo-2", true));
        assert!(
            r.contains(
                "would fence 2 members of demo (demo-0, demo-2), as many as its replicationFactor 2"
            ),
            "{r}"
        );
        assert!(r.contains("spec.fencedMembersAcknowledged: true"), "{r}");
        let cr = cluster(json!({"replicationFactor": 2, "fencedMembers": ["demo-0"],
            "fencedMembersAcknowledged": true}));
        let e = fence(&cr, "demo-2", true).unwrap().unwrap();
        assert_eq!(
            e.patch["spec"]["fencedMembers"],
            json!(["demo-0", "demo-2"])
        );
        // Unfencing is never refused.
        let cr = cluster(
            json!({"replicationFactor": 2, "fencedMembers": ["demo-0", "demo-1"],
            "fencedMembersAcknowledged": true}),
        );
        assert!(fence(&cr, "demo-1", false).unwrap().is_some());
    }

    #[test]
    fn fence_and_unfence_edit_the_list_and_refuse_unknown_members() {
        let cr = cluster(json!({"replicationFactor": 3, "fencedMembers": ["demo-0"]}));
        let e = fence(&cr, "demo-2", true).unwrap().unwrap();
        assert_eq!(
            e.patch,
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"fencedMembers": ["demo-0", "demo-2"]}})
        );
        assert_eq!(fence(&cr, "demo-0", true).unwrap(), None, "already fenced");
        let r = refusal(fence(&cr, "demo-8", true));
        assert!(r.contains("demo-8 is not a member of demo"), "{r}");
        let e = fence(&cr, "demo-0", false).unwrap().unwrap();
        assert_eq!(e.patch["spec"], json!({"fencedMembers": []}));
        let r = refusal(fence(&cr, "demo-1", false));
        assert!(
            r.contains("demo-1 is not fenced in demo (spec.fencedMembers: [demo-0])"),
            "{r}"
        );
    }

    #[test]
    fn pause_hibernate_and_wake_patch_their_fields() {
        let cr = cluster(json!({"storage": {"staleVolumeGraceSeconds": 600}}));
        assert_eq!(pause(&cr, true).patch, json!({"spec": {"paused": true}}));
        assert_eq!(pause(&cr, false).patch, json!({"spec": {"paused": false}}));
        assert_eq!(hibernate(&cr).patch, json!({"spec": {"hibernation": true}}));
        assert_eq!(
            wake(&cr, Wake::OwnVolumes).unwrap().patch,
            json!({"spec": {"hibernation": false}})
        );
        let r = refusal(wake(&cr, Wake::FreshVolumesUnconfirmed));
        assert!(
            r.contains("(600 s): all its data is lost") && r.contains("--yes-lose-data"),
            "{r}"
        );
        assert_eq!(
            wake(&cr, Wake::FreshVolumesConfirmed).unwrap().patch,
            json!({"spec": {"hibernation": false, "storage": {"freshVolumesOnWake": true}}})
        );
    }

    #[test]
    fn replace_annotates_the_pod_never_deletes_it() {
        let cr = cluster(json!({}));
        let e = replace(&cr, "demo-1", true, PodState::Running).unwrap();
        assert_eq!(
            e.patch,
            json!({"metadata": {"annotations": {"marekvs.io/replace-volume": "true"}}})
        );
        let e = replace(&cr, "demo-1", false, PodState::Running).unwrap();
        assert_eq!(
            e.patch,
            json!({"metadata": {"annotations": {"marekvs.io/restart": "true"}}})
        );
        assert!(!e.done.contains("paused"));
        let paused = cluster(json!({"paused": true}));
        let e = replace(&paused, "demo-1", false, PodState::Running).unwrap();
        assert!(e.done.contains("held while paused"), "{}", e.done);
        let r = refusal(replace(&cr, "demo-4", false, PodState::Running));
        assert!(r.contains("demo-4 is not a member"), "{r}");
        let r = refusal(replace(&cr, "demo-1", false, PodState::Missing));
        assert!(r.contains("demo-1 has no pod"), "{r}");
        let r = refusal(replace(&cr, "demo-1", true, PodState::Terminating));
        assert!(r.contains("already going away"), "{r}");
    }
}
