//! Adoption of a StatefulSet's orphaned members (migration from marekvs's own operator).
//!
//! A pod without a controller is a look-alike (`ownership`), unless the cluster object opts in
//! to adoption (`marekvs.io/adopt: statefulset-orphans`) and the pod is exactly the member the
//! cluster would run under that name: a member ordinal within the cluster's size, Running and
//! Ready, not terminating, with the member's hostname (its node id), the member's volume, and
//! the cluster's replication factor. Only then does the operator become its controller; it
//! never deletes or re-creates a pod to adopt it. Anything else stays a look-alike.

/// What the orphaned pod with a member's name says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    pub ordinal: u32,
    pub running: bool,
    pub ready: bool,
    pub terminating: bool,
    /// `spec.hostname`: the node id is its ordinal.
    pub hostname: Option<String>,
    /// The claim names of its PersistentVolumeClaim volumes.
    pub claims: Vec<String>,
    /// `MAREKVS_REPLICAS_N` of its marekvs container, as written.
    pub replicas_n: Option<String>,
}

/// The member the cluster would run under the orphan's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The member's name, `<cluster>-<ordinal>`.
    pub member: String,
    /// Its volume, `data-<cluster>-<ordinal>`.
    pub claim: String,
    /// Ordinals below this may be members (the spec's size, or the autoscaler's maximum).
    pub size: u32,
    pub replication_factor: i32,
}

/// Why an orphan is not adopted (it stays a look-alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAdopted {
    /// The cluster object did not opt in.
    NotOptedIn,
    OutsideSize {
        size: u32,
    },
    NotRunningAndReady,
    Terminating,
    OtherHostname(Option<String>),
    OtherVolume,
    OtherReplicationFactor(Option<String>),
}

impl NotAdopted {
    /// In words, for logs and Events.
    pub fn message(&self) -> String {
        match self {
            NotAdopted::NotOptedIn => "the cluster does not opt in (marekvs.io/adopt)".into(),
            NotAdopted::OutsideSize { size } => {
                format!("its ordinal is not below the cluster's size {size}")
            }
            NotAdopted::NotRunningAndReady => "it is not Running and Ready".into(),
            NotAdopted::Terminating => "it is terminating".into(),
            NotAdopted::OtherHostname(h) => {
                format!("its hostname {h:?} is not the member's name (its node id would differ)")
            }
            NotAdopted::OtherVolume => "it does not mount the member's volume".into(),
            NotAdopted::OtherReplicationFactor(n) => {
                format!("its MAREKVS_REPLICAS_N {n:?} is not the cluster's replicationFactor")
            }
        }
    }
}

/// Whether the orphan may be adopted as the member `wanted`, in the order a user would fix it.
pub fn may_adopt(opted_in: bool, orphan: &Orphan, wanted: &Wanted) -> Result<(), NotAdopted> {
    if !opted_in {
        return Err(NotAdopted::NotOptedIn);
    }
    if orphan.ordinal >= wanted.size {
        return Err(NotAdopted::OutsideSize { size: wanted.size });
    }
    if orphan.terminating {
        return Err(NotAdopted::Terminating);
    }
    if !(orphan.running && orphan.ready) {
        return Err(NotAdopted::NotRunningAndReady);
    }
    if orphan.hostname.as_deref() != Some(wanted.member.as_str()) {
        return Err(NotAdopted::OtherHostname(orphan.hostname.clone()));
    }
    if !orphan.claims.contains(&wanted.claim) {
        return Err(NotAdopted::OtherVolume);
    }
    let rf = wanted.replication_factor.to_string();
    if orphan.replicas_n.as_deref().map(str::trim) != Some(rf.as_str()) {
        return Err(NotAdopted::OtherReplicationFactor(
            orphan.replicas_n.clone(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orphan() -> Orphan {
        Orphan {
            ordinal: 2,
            running: true,
            ready: true,
            terminating: false,
            hostname: Some("demo-2".into()),
            claims: vec!["data-demo-2".into()],
            replicas_n: Some("2".into()),
        }
    }

    fn wanted() -> Wanted {
        Wanted {
            member: "demo-2".into(),
            claim: "data-demo-2".into(),
            size: 3,
            replication_factor: 2,
        }
    }

    #[test]
    fn the_member_the_cluster_would_run_is_adopted_when_opted_in() {
        assert_eq!(may_adopt(true, &orphan(), &wanted()), Ok(()));
        assert_eq!(
            may_adopt(false, &orphan(), &wanted()),
            Err(NotAdopted::NotOptedIn)
        );
    }

    #[test]
    fn anything_else_stays_a_look_alike_and_says_why() {
        let cases: Vec<(Orphan, Wanted, NotAdopted)> = vec![
            (
                orphan(),
                Wanted {
                    size: 2,
                    ..wanted()
                },
                NotAdopted::OutsideSize { size: 2 },
            ),
            (
                Orphan {
                    ready: false,
                    ..orphan()
                },
                wanted(),
                NotAdopted::NotRunningAndReady,
            ),
            (
                Orphan {
                    running: false,
                    ..orphan()
                },
                wanted(),
                NotAdopted::NotRunningAndReady,
            ),
            (
                Orphan {
                    terminating: true,
                    ..orphan()
                },
                wanted(),
                NotAdopted::Terminating,
            ),
            (
                Orphan {
                    hostname: None,
                    ..orphan()
                },
                wanted(),
                NotAdopted::OtherHostname(None),
            ),
            (
                Orphan {
                    hostname: Some("other-2".into()),
                    ..orphan()
                },
                wanted(),
                NotAdopted::OtherHostname(Some("other-2".into())),
            ),
            (
                Orphan {
                    claims: vec!["data-other-2".into()],
                    ..orphan()
                },
                wanted(),
                NotAdopted::OtherVolume,
            ),
            (
                Orphan {
                    replicas_n: Some("3".into()),
                    ..orphan()
                },
                wanted(),
                NotAdopted::OtherReplicationFactor(Some("3".into())),
            ),
            (
                Orphan {
                    replicas_n: None,
                    ..orphan()
                },
                wanted(),
                NotAdopted::OtherReplicationFactor(None),
            ),
        ];
        for (o, w, why) in cases {
            let got = may_adopt(true, &o, &w);
            assert_eq!(got, Err(why.clone()), "{o:?}");
            assert!(!why.message().is_empty());
        }
    }
}
