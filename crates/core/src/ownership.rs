//! Ownership, not look-alikes: which of the objects that carry a member's name (and the
//! cluster's labels) are the cluster's own.
//!
//! - A pod is a member's only if the cluster object (this uid) is its controller. Anything
//!   else (no controller: made by hand, or orphaned by `--cascade=orphan`; another
//!   controller) is a look-alike.
//! - A PVC has no owner reference on purpose (data outlives the object); the operator stamps
//!   the uid of the cluster object that created it in an annotation. Stamped with this uid:
//!   ours. Stamped with another uid: made by this operator for an earlier object of the same
//!   name (the PVC carries its name and labels), restamped with the new uid. Not stamped:
//!   made by an earlier version of the operator only if its member is in `status.instanceNames`
//!   and its pod (which mounts it by name) is controlled by this cluster; stamped then. The
//!   same for a volume of a StatefulSet's member adopted by this cluster (`adoption`: the
//!   cluster opts in with `marekvs.io/adopt`), whose member is not yet in
//!   `status.instanceNames`. Otherwise a look-alike.
//!
//! A look-alike is never adopted, scraped, drained, deleted or counted as ready: its member
//! is observed with `MemberObs::look_alike`, nothing is created in its name, and every
//! disruptive step waits until it is gone (unknown is never safe).

/// What the pod that carries a member's name says about its controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodController {
    /// No controller owner reference.
    None,
    /// A controller owner reference of this kind, name and uid.
    Some {
        kind: String,
        name: String,
        uid: String,
    },
}

/// What the PVC that carries a member's name says about who made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvcClaim {
    /// The uid its cluster-uid annotation carries, if any.
    pub stamped_uid: Option<String>,
    /// Its member is in `status.instanceNames`.
    pub member: bool,
    /// The pod with its member's name is controlled by this cluster (and so mounts it).
    pub mounted_by_ours: bool,
    /// The cluster opts in to adopting a StatefulSet's orphaned members (`adoption`).
    pub adopting: bool,
}

/// An object holding a member's name that is not the cluster's, as status lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LookAlikeSeen {
    pub kind: ObjectKind,
    pub name: String,
    /// The member whose name it holds.
    pub member: String,
    /// Why it is not the cluster's, in words.
    pub why: String,
}

/// The kinds of object a member is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectKind {
    Pod,
    PersistentVolumeClaim,
}

/// Why an object is a look-alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookAlikeWhy {
    /// A pod without a controller (made by hand, or orphaned when its cluster was deleted with
    /// `--cascade=orphan`).
    NoController,
    /// A pod controlled by another object.
    OtherController { kind: String, name: String },
    /// A PVC this operator did not create (no cluster-uid annotation), whose member is not a
    /// running member of this cluster.
    NotStamped,
}

impl LookAlikeWhy {
    /// In words, for status and Events.
    pub fn message(&self) -> String {
        match self {
            LookAlikeWhy::NoController => {
                "has no controller owner reference (made by hand, or orphaned): not this cluster's"
                    .into()
            }
            LookAlikeWhy::OtherController { kind, name } => {
                format!("is controlled by {kind} {name}, not by this cluster")
            }
            LookAlikeWhy::NotStamped => {
                "was not created by the operator for this cluster (no marekvs.io/cluster-uid annotation)"
                    .into()
            }
        }
    }
}

/// Whose an object with a member's name is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    Ours,
    /// Ours, but stamped for another object (`from`: the uid it carried, `None`: none): stamp
    /// it with this cluster's uid.
    Restamp {
        from: Option<String>,
    },
    LookAlike(LookAlikeWhy),
}

/// Whose the pod with a member's name is: ours only if this cluster (`cluster_uid`) controls it.
pub fn pod_ownership(controller: &PodController, cluster_uid: &str) -> Ownership {
    match controller {
        PodController::Some { uid, .. } if uid == cluster_uid => Ownership::Ours,
        PodController::Some { kind, name, .. } => {
            Ownership::LookAlike(LookAlikeWhy::OtherController {
                kind: kind.clone(),
                name: name.clone(),
            })
        }
        PodController::None => Ownership::LookAlike(LookAlikeWhy::NoController),
    }
}

/// Whether the cluster may apply one of its children of a fixed name (a Service, the PDB) over
/// the object that already has that name: `Err` with the object that controls it when that is
/// another object (another cluster whose derived name is the same, another operator's object).
/// Applying would not flip it (the API server refuses a second controller reference) but would
/// fail on every pass. An object with no controller is taken over in place: that is how a
/// migration from marekvs's own operator keeps its Services.
pub fn fixed_child_claim(found: &PodController, cluster_uid: &str) -> Result<(), (String, String)> {
    match found {
        PodController::Some { uid, kind, name } if uid != cluster_uid => {
            Err((kind.clone(), name.clone()))
        }
        PodController::Some { .. } | PodController::None => Ok(()),
    }
}

/// Whose the PVC with a member's name is (see the module's rules).
pub fn pvc_ownership(claim: &PvcClaim, cluster_uid: &str) -> Ownership {
    match &claim.stamped_uid {
        Some(uid) if uid == cluster_uid => Ownership::Ours,
        Some(uid) => Ownership::Restamp {
            from: Some(uid.clone()),
        },
        None if (claim.member || claim.adopting) && claim.mounted_by_ours => {
            Ownership::Restamp { from: None }
        }
        None => Ownership::LookAlike(LookAlikeWhy::NotStamped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controlled_by(uid: &str) -> PodController {
        PodController::Some {
            kind: "MarekvsCluster".into(),
            name: "demo".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_fixed_child_another_object_controls_is_never_applied_over() {
        let by = |uid: &str| PodController::Some {
            kind: "MarekvsCluster".into(),
            name: "demo-headless".into(),
            uid: uid.into(),
        };
        assert_eq!(fixed_child_claim(&by("ours"), "ours"), Ok(()));
        assert_eq!(fixed_child_claim(&PodController::None, "ours"), Ok(()));
        assert_eq!(
            fixed_child_claim(&by("theirs"), "ours"),
            Err(("MarekvsCluster".into(), "demo-headless".into()))
        );
    }

    #[test]
    fn a_pod_is_a_members_only_under_this_clusters_control() {
        assert_eq!(pod_ownership(&controlled_by("u2"), "u2"), Ownership::Ours);
        // The same name, controlled by the deleted object of the same name: not ours.
        assert_eq!(
            pod_ownership(&controlled_by("u1"), "u2"),
            Ownership::LookAlike(LookAlikeWhy::OtherController {
                kind: "MarekvsCluster".into(),
                name: "demo".into()
            })
        );
        assert_eq!(
            pod_ownership(&PodController::None, "u2"),
            Ownership::LookAlike(LookAlikeWhy::NoController)
        );
    }

    #[test]
    fn a_pvc_is_ours_when_stamped_restamped_when_stamped_before_and_else_a_look_alike() {
        let claim = |stamped: Option<&str>, member: bool, mounted_by_ours: bool| PvcClaim {
            stamped_uid: stamped.map(str::to_owned),
            member,
            mounted_by_ours,
            adopting: false,
        };
        for (member, mounted) in [(false, false), (true, false), (false, true), (true, true)] {
            // The stamp decides, whatever the membership.
            assert_eq!(
                pvc_ownership(&claim(Some("u2"), member, mounted), "u2"),
                Ownership::Ours
            );
            assert_eq!(
                pvc_ownership(&claim(Some("u1"), member, mounted), "u2"),
                Ownership::Restamp {
                    from: Some("u1".into())
                }
            );
        }
        // Unstamped (an earlier operator version): only a member's, mounted by our pod.
        assert_eq!(
            pvc_ownership(&claim(None, true, true), "u2"),
            Ownership::Restamp { from: None }
        );
        for (member, mounted) in [(false, false), (true, false), (false, true)] {
            assert_eq!(
                pvc_ownership(&claim(None, member, mounted), "u2"),
                Ownership::LookAlike(LookAlikeWhy::NotStamped),
                "member {member}, mounted {mounted}"
            );
        }
    }

    #[test]
    fn an_adopting_cluster_stamps_the_unstamped_volume_its_adopted_pod_mounts_and_only_that() {
        let claim = |member: bool, mounted_by_ours: bool| PvcClaim {
            stamped_uid: None,
            member,
            mounted_by_ours,
            adopting: true,
        };
        // Not yet a member in status: its pod was adopted this pass.
        assert_eq!(
            pvc_ownership(&claim(false, true), "u2"),
            Ownership::Restamp { from: None }
        );
        // Its pod is not (yet) the cluster's: still a look-alike.
        for member in [false, true] {
            assert_eq!(
                pvc_ownership(&claim(member, false), "u2"),
                Ownership::LookAlike(LookAlikeWhy::NotStamped)
            );
        }
    }

    #[test]
    fn every_reason_says_what_it_is() {
        for why in [
            LookAlikeWhy::NoController,
            LookAlikeWhy::OtherController {
                kind: "Deployment".into(),
                name: "web".into(),
            },
            LookAlikeWhy::NotStamped,
        ] {
            assert!(!why.message().is_empty());
        }
        assert!(
            LookAlikeWhy::OtherController {
                kind: "Deployment".into(),
                name: "web".into()
            }
            .message()
            .contains("Deployment web")
        );
    }
}
