//! What can stop a pass, each with the call and the object it was about.

use marekvs_core::Action;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be acted on; the pass waits for it to change (the CRD's validation
    /// catches nearly everything before this).
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    #[error("watch caches not synced yet")]
    NotSynced,
    /// Applying a child that does not depend on the runbook (a Service, the PDB).
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Writing status (the record that precedes every action).
    #[error("writing the status of {name}: {source}")]
    Record {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Carrying out one of the runbook's actions.
    #[error("{action:?} ({object}): {source}")]
    Act {
        action: Action,
        object: String,
        #[source]
        source: kube::Error,
    },
    /// An object the operator built could not be serialized (a bug, not a bad spec).
    #[error("serializing {what}: {source}")]
    Serialize {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// Reading objects outside the watch caches.
    #[error("reading {what}: {source}")]
    Observe {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A child of a fixed name (a Service, the PDB) exists, controlled by another object: it
    /// is not applied over.
    #[error(
        "{kind} {name} is controlled by {owner_kind} {owner_name}, not by this cluster: rename or delete one of them"
    )]
    NameTaken {
        kind: String,
        name: String,
        owner_kind: String,
        owner_name: String,
    },
    /// The cluster object has no name or uid, so its children cannot name it as their owner
    /// (an object read from the API always has both).
    #[error("{0} has no uid: its children cannot reference it as their owner")]
    NoUid(String),
}

impl Error {
    fn api(&self) -> Option<&kube::Error> {
        match self {
            Error::Apply { source, .. }
            | Error::Record { source, .. }
            | Error::Act { source, .. }
            | Error::Observe { source, .. } => Some(source),
            Error::InvalidSpec(_)
            | Error::NameTaken { .. }
            | Error::NotSynced
            | Error::Serialize { .. }
            | Error::NoUid(_) => None,
        }
    }

    /// The HTTP status of a failed API call.
    pub fn code(&self) -> Option<u16> {
        match self.api() {
            Some(kube::Error::Api(e)) => Some(e.code),
            _ => None,
        }
    }

    /// For the errors metric.
    pub fn kind(&self) -> &'static str {
        match (self, self.code()) {
            (Error::InvalidSpec(_), _) => "invalid_spec",
            (Error::NameTaken { .. }, _) => "name_taken",
            (Error::NotSynced, _) => "not_synced",
            (Error::Serialize { .. }, _) => "serialize",
            (Error::NoUid(_), _) => "no_uid",
            (_, Some(409)) => "conflict",
            (_, Some(404)) => "not_found",
            (_, Some(422 | 400)) => "invalid",
            (_, Some(403)) => "forbidden",
            (_, Some(_)) => "api",
            (_, None) => "transport",
        }
    }
}
