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

/// The next `n` members to remove, in the order the removals would happen: `choose_victim`
/// over the members left after each earlier choice (listed members lowest ordinal first, then
/// those not ready, highest first, then the highest ordinals).
pub fn removal_order(
    members: &BTreeSet<u32>,
    user_chosen: &BTreeSet<u32>,
    ready: impl Fn(u32) -> bool,
    n: usize,
) -> Vec<(u32, VictimReason)> {
    let mut left = members.clone();
    let mut order = Vec::new();
    while order.len() < n && !left.is_empty() {
        let (o, reason) = choose_victim(&left, user_chosen, &ready);
        left.remove(&o);
        order.push((o, reason));
    }
    order
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

    #[test]
    fn removal_order_repeats_the_choice_over_the_members_left() {
        let m = set(&[0, 1, 2, 3, 4, 5]);
        assert_eq!(
            removal_order(&m, &set(&[3, 1, 9]), |o| o != 2, 5),
            vec![
                (1, VictimReason::UserChosen),
                (3, VictimReason::UserChosen),
                (2, VictimReason::NotReady),
                (5, VictimReason::HighestOrdinal),
                (4, VictimReason::HighestOrdinal),
            ]
        );
        assert_eq!(removal_order(&m, &set(&[]), |_| true, 0), vec![]);
        assert_eq!(removal_order(&set(&[0]), &set(&[]), |_| true, 3).len(), 1);
    }
}
