//! `kubectl mkv version`: the plugin's version, and the operator's as the clusters' status
//! records it (`status.operatorVersion`, written by the operator with each pass it records):
//! the plugin never talks to the operator, so that is the operator it acts through.

use std::collections::BTreeMap;

/// The plugin's own version (its crate's, the release's).
pub const PLUGIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `version --client`: the plugin's version alone.
pub fn client_line() -> String {
    format!("kubectl-mkv {PLUGIN_VERSION}\n")
}

/// What `version` prints, and the warnings it writes to stderr: `clusters` are the
/// MarekvsClusters read in `namespace`, each with the operator version its status records.
pub fn report(namespace: &str, clusters: &[(String, Option<String>)]) -> (String, Vec<String>) {
    let mut out = client_line();
    let mut warnings = Vec::new();
    let mut by_version: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, version) in clusters {
        by_version
            .entry(version.as_deref().unwrap_or("unknown"))
            .or_default()
            .push(name);
    }
    if by_version.is_empty() {
        out.push_str(&format!(
            "operator: unknown (no MarekvsCluster in namespace {namespace} to read it from)\n"
        ));
    }
    for (version, names) in &by_version {
        out.push_str(&format!(
            "operator {version}: the last pass over {} in namespace {namespace}\n",
            names.join(", ")
        ));
        if *version != PLUGIN_VERSION {
            warnings.push(if *version == "unknown" {
                format!(
                    "the operator's version is not recorded on {} (no pass yet, or an operator \
                     older than this plugin)",
                    names.join(", ")
                )
            } else {
                format!(
                    "this plugin is {PLUGIN_VERSION} and the operator acting on {} is \
                     {version}: fields one knows may be unknown to the other; use the plugin \
                     of the operator's release",
                    names.join(", ")
                )
            });
        }
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clusters(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.map(String::from)))
            .collect()
    }

    #[test]
    fn the_same_version_everywhere_warns_of_nothing() {
        let (out, warnings) = report(
            "apps",
            &clusters(&[("a", Some(PLUGIN_VERSION)), ("b", Some(PLUGIN_VERSION))]),
        );
        assert_eq!(
            out,
            format!(
                "kubectl-mkv {PLUGIN_VERSION}\noperator {PLUGIN_VERSION}: the last pass over a, b in namespace apps\n"
            )
        );
        assert!(warnings.is_empty());
    }

    #[test]
    fn another_operator_version_or_none_recorded_is_warned_of_naming_the_clusters() {
        let (out, warnings) = report(
            "apps",
            &clusters(&[
                ("a", Some("9.9.9")),
                ("b", None),
                ("c", Some(PLUGIN_VERSION)),
            ]),
        );
        assert!(
            out.contains("operator 9.9.9: the last pass over a in namespace apps\n"),
            "{out}"
        );
        assert!(
            out.contains("operator unknown: the last pass over b in namespace apps\n"),
            "{out}"
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("the operator acting on a is 9.9.9")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("not recorded on b")),
            "{warnings:?}"
        );
    }

    #[test]
    fn no_cluster_to_read_says_the_operator_is_unknown() {
        let (out, warnings) = report("apps", &[]);
        assert!(out.ends_with(
            "operator: unknown (no MarekvsCluster in namespace apps to read it from)\n"
        ));
        assert!(warnings.is_empty());
    }
}
