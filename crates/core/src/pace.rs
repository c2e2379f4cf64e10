//! How soon a cluster is looked at again after a pass.

use crate::types::{Decision, Memory, Millis};

/// A pass that recorded a new step of a removal or a restart acts on it at once (the next pass
/// carries it out); otherwise the decision's own pace holds. Never sooner than 50 ms.
pub fn next_look_ms(before: &Memory, d: &Decision) -> Millis {
    let removal_step = |m: &Memory| m.removal().map(|r| r.step);
    let roll_step = |m: &Memory| m.roll().map(|r| (r.ordinal, r.step));
    let stepped = (d.memory.removal().is_some() && removal_step(&d.memory) != removal_step(before))
        || (d.memory.roll().is_some() && roll_step(&d.memory) != roll_step(before));
    if stepped { 50 } else { d.requeue_ms.max(50) }
}
