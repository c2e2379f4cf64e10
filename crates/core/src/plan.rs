//! Which ordinals to add and which member to remove.

use std::collections::BTreeSet;

use crate::types::VictimReason;

/// The `n` lowest ordinals not taken and not listed for removal.
pub fn free_ordinals(taken: &BTreeSet<u32>, skip: &BTreeSet<u32>, n: usize) -> Vec<u32> {
    (0..)
        .filter(|o| !taken.contains(o) && !skip.contains(o))
        .take(n)
        .collect()
}

/// The member to remove next: one the user listed (lowest ordinal first), else one without a
/// ready pod (highest first), else the highest ordinal. `members` must not be empty.
pub fn choose_victim(
    members: &BTreeSet<u32>,
    user_chosen: &BTreeSet<u32>,
    ready: impl Fn(u32) -> bool,
) -> (u32, VictimReason) {
    if let Some(o) = members.iter().find(|o| user_chosen.contains(o)) {
        return (*o, VictimReason::UserChosen);
    }
    if let Some(o) = members.iter().rev().find(|o| !ready(**o)) {
        return (*o, VictimReason::NotReady);
    }
    (
        *members.iter().next_back().expect("members is not empty"),
        VictimReason::HighestOrdinal,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    #[test]
    fn lowest_free_ordinals_skip_taken_and_listed() {
        assert_eq!(free_ordinals(&set(&[0, 2]), &set(&[]), 3), vec![1, 3, 4]);
        assert_eq!(free_ordinals(&set(&[0, 2]), &set(&[1]), 2), vec![3, 4]);
        assert_eq!(free_ordinals(&set(&[]), &set(&[]), 0), Vec::<u32>::new());
    }

    #[test]
    fn victim_order_is_user_choice_then_unready_then_highest() {
        let m = set(&[0, 1, 2, 3, 4]);
        assert_eq!(
            choose_victim(&m, &set(&[1, 3]), |_| true),
            (1, VictimReason::UserChosen)
        );
        assert_eq!(
            choose_victim(&m, &set(&[9]), |o| o != 2),
            (2, VictimReason::NotReady)
        );
        assert_eq!(
            choose_victim(&m, &set(&[]), |_| true),
            (4, VictimReason::HighestOrdinal)
        );
    }
}
