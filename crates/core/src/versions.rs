//! Which marekvs release each member runs, as its `/metrics` says (`marekvs_info{version}`),
//! and whether the mesh is mixed. Some releases are wire breaks that allow no mixed-version
//! mesh (marekvs design/04-replication.md): while versions differ, gossip still converges, so
//! only this report shows it.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::MemberObs;

/// The members' versions this pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    /// Each version read, with the members that run it.
    pub running: BTreeMap<String, Vec<u32>>,
    /// Members whose version was not read (no pod, no scrape, or none reported).
    pub unknown: Vec<u32>,
}

/// How the versions compare, for the `MixedVersions` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Two or more versions run at once.
    Mixed,
    /// Every member runs this one.
    One(String),
    /// Not every member's version is known, and those known agree (or none is known).
    Unknown,
}

impl Versions {
    pub fn mix(&self) -> Mix {
        match (self.running.len(), self.unknown.is_empty()) {
            (2.., _) => Mix::Mixed,
            (1, true) => Mix::One(self.running.keys().next().cloned().unwrap_or_default()),
            _ => Mix::Unknown,
        }
    }

    /// "demo-0, demo-1 run 0.2.0; demo-2 runs 0.3.0; no version read from demo-3".
    pub fn describe(&self, name: impl Fn(u32) -> String) -> String {
        let names = |os: &[u32]| os.iter().map(|o| name(*o)).collect::<Vec<_>>().join(", ");
        let mut parts: Vec<String> = self
            .running
            .iter()
            .map(|(v, os)| {
                let verb = if os.len() == 1 { "runs" } else { "run" };
                format!("{} {verb} {v}", names(os))
            })
            .collect();
        if !self.unknown.is_empty() {
            parts.push(format!("no version read from {}", names(&self.unknown)));
        }
        parts.join("; ")
    }
}

/// The versions of `members`, from this pass's scrapes.
pub fn versions(members: &BTreeSet<u32>, observed: &BTreeMap<u32, MemberObs>) -> Versions {
    let mut out = Versions::default();
    for &o in members {
        match observed
            .get(&o)
            .and_then(|m| m.scrape.as_ref())
            .and_then(|s| s.version.clone())
        {
            Some(v) => out.running.entry(v).or_default().push(o),
            None => out.unknown.push(o),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Scrape;

    fn on(v: Option<&str>) -> MemberObs {
        MemberObs {
            scrape: Some(Scrape {
                version: v.map(str::to_string),
                ..Scrape::default()
            }),
            ..MemberObs::default()
        }
    }

    #[test]
    fn one_version_mixed_and_unknown_are_told_apart() {
        let name = |o: u32| format!("demo-{o}");
        let members: BTreeSet<u32> = (0..3).collect();
        let mut observed: BTreeMap<u32, MemberObs> =
            (0..3).map(|o| (o, on(Some("0.2.0")))).collect();
        let v = versions(&members, &observed);
        assert_eq!(v.mix(), Mix::One("0.2.0".into()));
        assert_eq!(v.describe(name), "demo-0, demo-1, demo-2 run 0.2.0");

        observed.insert(2, on(Some("0.3.0")));
        let v = versions(&members, &observed);
        assert_eq!(v.mix(), Mix::Mixed);
        assert_eq!(
            v.describe(name),
            "demo-0, demo-1 run 0.2.0; demo-2 runs 0.3.0"
        );

        // A member not read: unknown while the rest agree, still mixed while they do not.
        observed.insert(1, on(None));
        assert_eq!(versions(&members, &observed).mix(), Mix::Mixed);
        observed.insert(2, MemberObs::default());
        let v = versions(&members, &observed);
        assert_eq!(v.mix(), Mix::Unknown);
        assert_eq!(
            v.describe(name),
            "demo-0 runs 0.2.0; no version read from demo-1, demo-2"
        );
        assert_eq!(versions(&BTreeSet::new(), &observed).mix(), Mix::Unknown);
    }
}
