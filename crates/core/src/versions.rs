//! Which marekvs release each member runs, as its `/metrics` says (`marekvs_info{version}`),
//! and whether the mesh is mixed. Some releases are wire breaks that allow no mixed-version
//! mesh (marekvs design/04-replication.md): while versions differ, gossip still converges, so
//! only this report shows it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::types::MemberObs;

/// The release an image's tag names (`marekvs:0.3.0`, `marekvs:v0.3.1-rc.1` with the `v`
/// dropped, a digest after it ignored), `None` when the tag is no version (`latest`, none).
pub fn release_of_image(image: &str) -> Option<String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let tag = last.split_once(':')?.1.trim_start_matches('v');
    release_parts(tag).map(|_| tag.to_string())
}

/// `X.Y[.Z][-pre][+build]`: the numbers (a missing patch is 0) and the pre-release, if any.
fn release_parts(v: &str) -> Option<([u64; 3], Option<&str>)> {
    let v = v.split('+').next()?;
    let (core, pre) = match v.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let mut n = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n[i] = p.parse().ok()?;
    }
    Some((n, pre))
}

/// How two releases compare, as semantic versions (a pre-release before its release; two
/// pre-releases by their text); `None` when either is no release.
pub fn compare_releases(a: &str, b: &str) -> Option<Ordering> {
    let (an, ap) = release_parts(a)?;
    let (bn, bp) = release_parts(b)?;
    Some(an.cmp(&bn).then(match (ap, bp) {
        (None, None) => Ordering::Equal,
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(x), Some(y)) => x.cmp(y),
    }))
}

/// A change of image that would take members to an older release than one that runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Downgrade {
    /// The newest release running, and the members on it.
    pub from: String,
    pub on: Vec<u32>,
    /// The release the spec's image runs.
    pub to: String,
}

/// Whether the spec's image is older than a release that runs: by the release its tag names
/// (`image_release`), or, when the tag names none, as the members already on it report
/// against the members still on another image. `None` while nothing says so (unknown
/// releases compare as nothing: only a downgrade seen is held).
pub fn downgrade(
    image_release: Option<&str>,
    members: &BTreeSet<u32>,
    observed: &BTreeMap<u32, MemberObs>,
) -> Option<Downgrade> {
    // Per member: (its release, whether its pod runs another image than the spec's).
    let read: Vec<(u32, &str, bool)> = members
        .iter()
        .filter_map(|o| {
            let m = observed.get(o)?;
            let v = m.scrape.as_ref()?.version.as_deref()?;
            let other_image = m.pod.as_ref()?.image_outdated;
            Some((*o, v, other_image))
        })
        .collect();
    let newest = |of: &mut dyn Iterator<Item = &(u32, &str, bool)>| -> Option<String> {
        let mut best: Option<&str> = None;
        for (_, v, _) in of {
            if best.is_none_or(|b| compare_releases(v, b) == Some(Ordering::Greater)) {
                best = Some(v);
            }
        }
        best.map(str::to_string)
    };
    let (from, to) = match image_release {
        Some(to) => (newest(&mut read.iter().filter(|r| r.2))?, to.to_string()),
        None => (
            newest(&mut read.iter().filter(|r| r.2))?,
            newest(&mut read.iter().filter(|r| !r.2))?,
        ),
    };
    (compare_releases(&to, &from) == Some(Ordering::Less)).then(|| Downgrade {
        on: read
            .iter()
            .filter(|(_, v, other)| *other && *v == from)
            .map(|(o, _, _)| *o)
            .collect(),
        from,
        to,
    })
}

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
    use crate::types::{PodObs, Scrape};

    #[test]
    fn releases_compare_as_semantic_versions_and_tags_name_them() {
        use Ordering::*;
        for (a, b, want) in [
            ("0.2.0", "0.3.0", Some(Less)),
            ("0.10.0", "0.9.1", Some(Greater)),
            ("0.3", "0.3.0", Some(Equal)),
            ("0.3.0-rc.1", "0.3.0", Some(Less)),
            ("0.3.0-rc.2", "0.3.0-rc.1", Some(Greater)),
            ("0.3.0+abc", "0.3.0", Some(Equal)),
            ("latest", "0.3.0", None),
            ("1.x", "1.0", None),
        ] {
            assert_eq!(compare_releases(a, b), want, "{a} vs {b}");
        }
        assert_eq!(
            release_of_image("ghcr.io/yannick/marekvs:0.3.0").as_deref(),
            Some("0.3.0")
        );
        assert_eq!(
            release_of_image("marekvs:v0.3.1-rc.1@sha256:ab").as_deref(),
            Some("0.3.1-rc.1")
        );
        assert_eq!(release_of_image("localhost:5000/marekvs"), None);
        assert_eq!(release_of_image("marekvs:latest"), None);
    }

    /// Member `o` on `version`, its pod on the spec's image or another.
    fn member(version: &str, other_image: bool) -> MemberObs {
        MemberObs {
            pod: Some(PodObs {
                image_outdated: other_image,
                ..PodObs::default()
            }),
            ..on(Some(version))
        }
    }

    #[test]
    fn a_downgrade_is_seen_by_the_tag_or_by_what_restarted_members_report() {
        let members: BTreeSet<u32> = (0..3).collect();
        let all_old: BTreeMap<u32, MemberObs> =
            (0..3).map(|o| (o, member("0.3.0", true))).collect();
        // By the tag, before any member restarts.
        let d = downgrade(Some("0.2.0"), &members, &all_old).unwrap();
        assert_eq!(
            (d.from.as_str(), d.to.as_str(), d.on.clone()),
            ("0.3.0", "0.2.0", vec![0, 1, 2])
        );
        assert_eq!(downgrade(Some("0.3.1"), &members, &all_old), None);
        assert_eq!(downgrade(Some("0.3.0"), &members, &all_old), None);
        // A tag that names no release: nothing known until a member runs it.
        assert_eq!(downgrade(None, &members, &all_old), None);
        let mut one_back = all_old.clone();
        one_back.insert(2, member("0.2.0", false));
        let d = downgrade(None, &members, &one_back).unwrap();
        assert_eq!(
            (d.from.as_str(), d.to.as_str(), d.on.clone()),
            ("0.3.0", "0.2.0", vec![0, 1])
        );
        // An upgrade seen the same way is none.
        let mut one_up = all_old.clone();
        one_up.insert(2, member("0.4.0", false));
        assert_eq!(downgrade(None, &members, &one_up), None);
        // Every member on the spec's image: nothing is left to take back.
        let done: BTreeMap<u32, MemberObs> = (0..3).map(|o| (o, member("0.2.0", false))).collect();
        assert_eq!(downgrade(Some("0.2.0"), &members, &done), None);
    }

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
