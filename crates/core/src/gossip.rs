//! The gossip cluster name a cluster's members run with (`MAREKVS_CLUSTER`).
//!
//! A marekvs node refuses gossip from a node whose cluster name differs (chitchat's cluster
//! id), and the name is `marekvs` unless set. Two clusters left at that default in one network
//! merge as soon as one member dials an address that now belongs to the other (a pod IP
//! reused after a pod was deleted, a stale seed): each then counts the other's members as its
//! own, places data on them and hands data off to them. So every cluster this operator creates
//! gets its own name, `<namespace>/<name>`, recorded in `status.gossipCluster` before any pod
//! is built with it, and never changed afterwards.
//!
//! A cluster that already ran without a recorded name (created by an earlier version of this
//! operator, or adopted from marekvs's own operator) keeps the server's default: its members
//! must all agree, and a rolling change that gave the new name to one member at a time would
//! split them. It is recorded as `marekvs` and its pods get no variable (their spec is
//! unchanged: no rollout on upgrade).

/// The name a marekvs node gossips under when `MAREKVS_CLUSTER` is not set.
pub const SERVER_DEFAULT: &str = "marekvs";

/// The name to record for a cluster that has none recorded yet: its own for a cluster with no
/// member and no pod yet, else the server's default its running members already use.
pub fn first_name(namespace: &str, name: &str, has_members: bool, has_pods: bool) -> String {
    if has_members || has_pods {
        SERVER_DEFAULT.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// The value of `MAREKVS_CLUSTER` for the member pods, if any: none for the server's default.
pub fn env_value(recorded: &str) -> Option<&str> {
    (recorded != SERVER_DEFAULT).then_some(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_cluster_gets_its_own_name_and_a_running_one_keeps_the_default() {
        assert_eq!(first_name("ns", "demo", false, false), "ns/demo");
        assert_eq!(first_name("ns", "demo", true, false), "marekvs");
        // Adopted: pods of marekvs's own operator run, no member recorded yet.
        assert_eq!(first_name("ns", "demo", false, true), "marekvs");
        assert_eq!(env_value("ns/demo"), Some("ns/demo"));
        assert_eq!(env_value("marekvs"), None);
    }
}
