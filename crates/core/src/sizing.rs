//! How many members the stepper aims for this pass: `spec.nodes`, or, under the autoscaler,
//! what it asks for from the load and disk figures. The autoscaler only moves the target; the
//! stepper still decides every step.

use std::collections::BTreeMap;

use crate::autoscale::{
    LoadMemory, Policy, ScaleDecision, ScaleInput, ScaleMemory, decide_size, update_load,
};
use crate::types::{ClusterSpec, Disk, MemberObs, Millis};

pub struct SizingInput<'a> {
    pub spec: &'a ClusterSpec,
    /// `spec.autoscale`, when set.
    pub policy: Option<&'a Policy>,
    /// The members as status remembers them.
    pub members: &'a std::collections::BTreeSet<u32>,
    /// Observations with this pass's scrapes.
    pub observed: &'a BTreeMap<u32, MemberObs>,
    pub load: &'a LoadMemory,
    pub scale: &'a ScaleMemory,
    pub now: Millis,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    /// The spec with `nodes` set to the size to aim for.
    pub spec: ClusterSpec,
    /// The load figures to remember.
    pub load: LoadMemory,
    /// The autoscaler's wish, when it is on.
    pub scaling: Option<ScaleDecision>,
}

pub fn size(input: &SizingInput) -> Sizing {
    let SizingInput {
        spec,
        policy,
        members,
        observed,
        load,
        scale,
        now,
    } = *input;
    let scrape = |o: &u32| observed.get(o).and_then(|m| m.scrape.as_ref());
    // Only ready members count: a joining member's counter says nothing about the load yet.
    let counters: BTreeMap<u32, Option<u64>> = members
        .iter()
        .map(|o| {
            let ready = observed
                .get(o)
                .and_then(|m| m.pod.as_ref())
                .is_some_and(|p| p.ready);
            (*o, scrape(o).filter(|_| ready).map(|s| s.commands_total))
        })
        .collect();
    let load = update_load(load, &counters, now);
    // While hibernated the autoscaler holds: it is given no load and no disk figure, so it
    // keeps the size it last asked for (and its memory) until the wake.
    let scaling = policy.map(|policy| {
        let disks: BTreeMap<u32, Option<Disk>> = members
            .iter()
            .filter(|_| !spec.hibernation)
            .map(|o| (*o, scrape(o).and_then(|s| s.disk)))
            .collect();
        decide_size(&ScaleInput {
            policy,
            rf_floor: spec.floor(),
            initial: spec.nodes,
            members: members.len() as u32,
            ops_per_sec: load.ops_per_sec.filter(|_| !spec.hibernation),
            disks: &disks,
            memory: scale,
            now,
        })
    });
    let mut spec = spec.clone();
    if let Some(sd) = &scaling {
        spec.nodes = sd.desired;
    }
    Sizing {
        spec,
        load,
        scaling,
    }
}

/// The size to aim for before any member is scraped: under the autoscaler, the size it last
/// asked for (its load figures come with the scrapes).
pub fn unscraped_target(spec: &ClusterSpec, last_asked: Option<u32>) -> ClusterSpec {
    let mut spec = spec.clone();
    if let Some(desired) = last_asked {
        spec.nodes = desired.max(1);
    }
    spec
}
