//! The Prometheus text expositions the benchmarks read (the operator's `/metrics`, the API
//! server's), split a line at a time by the core's own parser
//! ([`marekvs_core::metrics::sample`]): comments and blank lines skipped, label values read
//! by key, a timestamp after the value not taken for it.

use std::collections::BTreeMap;

use marekvs_core::metrics::{Sample, sample};

/// What the API server counts as writes.
pub const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];

/// Every sample of an exposition, in order.
fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter_map(sample)
}

/// The sum of every series of `name`, or of those whose label `label.0` is `label.1`.
pub fn metric_sum(text: &str, name: &str, label: Option<(&str, &str)>) -> f64 {
    samples(text)
        .filter(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .filter_map(|s| s.value)
        .sum()
}

/// Histogram quantile from cumulative buckets (upper bound of the bucket that holds it). The
/// buckets read are those of `name` whose first label is `le`: the operator's histograms have
/// no other.
pub fn histogram_quantile(text: &str, name: &str, q: f64) -> f64 {
    let first_le = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, f64)> = samples(text)
        .filter(|s| s.series.starts_with(&first_le))
        .filter_map(|s| {
            let le = match s.label("le")? {
                "+Inf" => f64::INFINITY,
                le => le.parse().ok()?,
            };
            Some((le, s.value?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
        .unwrap_or(f64::NAN)
}

/// The buckets of histogram `name` in `after` less those in `before`, as exposition text (one
/// `series value` line per bucket, in series order) for [`histogram_quantile`].
pub fn diff_histogram(after: &str, before: &str, name: &str) -> String {
    // Cumulative buckets subtract bucket by bucket.
    let bucket = format!("{name}_bucket");
    let read = |t: &str| -> BTreeMap<String, f64> {
        samples(t)
            .filter(|s| s.name == bucket)
            .filter_map(|s| Some((s.series.to_string(), s.value?)))
            .collect()
    };
    let b = read(before);
    read(after)
        .into_iter()
        .map(|(s, v)| format!("{s} {}\n", v - b.get(&s).copied().unwrap_or(0.0)))
        .collect()
}

/// The value of an unlabelled series, if it is there.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    samples(text)
        .find(|s| s.series == name)
        .and_then(|s| s.value)
}

/// Every value of `label` of a counter, with its value.
pub fn by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    by_label_of(text, name, label, |_| true)
}

/// [`by_label`] over the series `keep` keeps.
fn by_label_of(
    text: &str,
    name: &str,
    label: &str,
    keep: impl Fn(&Sample<'_>) -> bool,
) -> BTreeMap<String, f64> {
    samples(text)
        .filter(|s| s.name == name && keep(s))
        .filter_map(|s| Some((s.label(label)?.to_string(), s.value?)))
        .fold(BTreeMap::new(), |mut m, (k, v)| {
            *m.entry(k).or_insert(0.0) += v;
            m
        })
}

/// How much each key grew from `before` to `after` (only those that did).
fn grown(before: BTreeMap<String, f64>, after: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// How much each label value of a counter grew between two readings (only those that did).
pub fn grew_by_label(before: &str, after: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    grown(by_label(before, name, label), by_label(after, name, label))
}

/// API server writes (all clients) between two readings, by verb then by resource.
pub fn apiserver_writes(before: &str, after: &str) -> (f64, BTreeMap<String, f64>) {
    let name = "apiserver_request_total";
    let write = |s: &Sample<'_>| s.label("verb").is_some_and(|v| WRITE_VERBS.contains(&v));
    let by_resource = grown(
        by_label_of(before, name, "resource", write),
        by_label_of(after, name, "resource", write),
    );
    (by_resource.values().sum(), by_resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator's `/metrics`, with look-alike names beside the ones read.
    const OPERATOR: &str = r#"# HELP marekvs_operator_leader_changes_total Leadership changes.
# TYPE marekvs_operator_leader_changes_total counter
marekvs_operator_leader_changes_total 5
# HELP marekvs_operator_leader 1 while this replica leads.
# TYPE marekvs_operator_leader gauge
marekvs_operator_leader 1
marekvs_operator_leading_since_seconds 1700000000.25

# TYPE marekvs_operator_api_requests_total counter
marekvs_operator_api_requests_total{resource="pods",verb="GET"} 10
marekvs_operator_api_requests_total{resource="leases",verb="GET"} 3
marekvs_operator_api_requests_total{resource="pods",verb="LIST"} 4
marekvs_operator_api_requests_total{resource="leases",verb="PATCH"} 7
marekvs_operator_api_requests_total{resource="nodes"} 2
marekvs_operator_api_requests_total_created{resource="pods",verb="GET"} 1000
# TYPE marekvs_operator_reconcile_duration_seconds histogram
marekvs_operator_reconcile_duration_seconds_bucket{le="0.005"} 2
marekvs_operator_reconcile_duration_seconds_bucket{le="0.01"} 5
marekvs_operator_reconcile_duration_seconds_bucket{le="0.1"} 9
marekvs_operator_reconcile_duration_seconds_bucket{le="1"} 10
marekvs_operator_reconcile_duration_seconds_bucket{le="+Inf"} 10
marekvs_operator_reconcile_duration_seconds_sum 1.5
marekvs_operator_reconcile_duration_seconds_count 10
# TYPE marekvs_operator_reconcile_queue_wait_seconds histogram
marekvs_operator_reconcile_queue_wait_seconds_bucket{le="0.005"} 8
marekvs_operator_reconcile_queue_wait_seconds_bucket{le="0.01"} 8
marekvs_operator_reconcile_queue_wait_seconds_bucket{le="0.1"} 10
marekvs_operator_reconcile_queue_wait_seconds_bucket{le="1"} 10
marekvs_operator_reconcile_queue_wait_seconds_bucket{le="+Inf"} 12
marekvs_operator_reconcile_queue_wait_seconds_sum 30
marekvs_operator_reconcile_queue_wait_seconds_count 12
"#;

    /// The same operator's reconcile histogram, read earlier.
    const OPERATOR_BEFORE: &str = r#"# TYPE marekvs_operator_reconcile_duration_seconds histogram
marekvs_operator_reconcile_duration_seconds_bucket{le="0.005"} 1
marekvs_operator_reconcile_duration_seconds_bucket{le="0.01"} 2
marekvs_operator_reconcile_duration_seconds_bucket{le="0.1"} 4
marekvs_operator_reconcile_duration_seconds_bucket{le="1"} 5
marekvs_operator_reconcile_duration_seconds_bucket{le="+Inf"} 5
marekvs_operator_reconcile_duration_seconds_sum 0.5
marekvs_operator_reconcile_duration_seconds_count 5
"#;

    const REQUESTS: &str = "marekvs_operator_api_requests_total";
    const DURATION: &str = "marekvs_operator_reconcile_duration_seconds";
    const QUEUE_WAIT: &str = "marekvs_operator_reconcile_queue_wait_seconds";

    fn counts(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn metric_reads_the_unlabelled_series_of_that_name_only() {
        assert_eq!(metric(OPERATOR, "marekvs_operator_leader"), Some(1.0));
        assert_eq!(
            metric(OPERATOR, "marekvs_operator_leading_since_seconds"),
            Some(1_700_000_000.25)
        );
        // Only labelled series: no unlabelled one.
        assert_eq!(metric(OPERATOR, REQUESTS), None);
        assert_eq!(
            metric(OPERATOR, "marekvs_operator_first_pass_seconds"),
            None
        );
    }

    #[test]
    fn metric_sum_adds_every_series_or_those_with_the_label() {
        // 10 + 3 + 4 + 7 + 2; not the 1,000 of `..._total_created`.
        assert_eq!(metric_sum(OPERATOR, REQUESTS, None), 26.0);
        assert_eq!(metric_sum(OPERATOR, REQUESTS, Some(("verb", "GET"))), 13.0);
        assert_eq!(metric_sum(OPERATOR, REQUESTS, Some(("verb", "PATCH"))), 7.0);
        assert_eq!(
            metric_sum(OPERATOR, REQUESTS, Some(("resource", "pods"))),
            14.0
        );
        assert_eq!(
            metric_sum(OPERATOR, REQUESTS, Some(("verb", "DELETE"))),
            0.0
        );
        // An unlabelled gauge; not `marekvs_operator_leader_changes_total`'s 5.
        assert_eq!(metric_sum(OPERATOR, "marekvs_operator_leader", None), 1.0);
    }

    #[test]
    fn by_label_sums_each_value_of_the_label() {
        assert_eq!(
            by_label(OPERATOR, REQUESTS, "verb"),
            counts(&[("GET", 13.0), ("LIST", 4.0), ("PATCH", 7.0)])
        );
        assert_eq!(
            by_label(OPERATOR, REQUESTS, "resource"),
            counts(&[("leases", 10.0), ("nodes", 2.0), ("pods", 14.0)])
        );
        assert_eq!(by_label(OPERATOR, REQUESTS, "code"), counts(&[]));
    }

    #[test]
    fn histogram_quantile_is_the_bound_of_the_bucket_holding_it() {
        // 10 observations: 0.5 × 10 = 5 are ≤ 0.01 (5), 0.99 × 10 = 9.9 only ≤ 1 (9 ≤ 0.1).
        assert_eq!(histogram_quantile(OPERATOR, DURATION, 0.5), 0.01);
        assert_eq!(histogram_quantile(OPERATOR, DURATION, 0.99), 1.0);
        // 12 observations: 6 are ≤ 0.005 (8), 11.88 only ≤ +Inf (10 ≤ 1, 12 in all).
        assert_eq!(histogram_quantile(OPERATOR, QUEUE_WAIT, 0.5), 0.005);
        assert_eq!(
            histogram_quantile(OPERATOR, QUEUE_WAIT, 0.99),
            f64::INFINITY
        );
        assert!(histogram_quantile(OPERATOR, "marekvs_operator_missing", 0.5).is_nan());
    }

    #[test]
    fn diff_histogram_subtracts_bucket_by_bucket() {
        let diff = diff_histogram(OPERATOR, OPERATOR_BEFORE, DURATION);
        assert_eq!(
            diff,
            "marekvs_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 5\n\
             marekvs_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1\n\
             marekvs_operator_reconcile_duration_seconds_bucket{le=\"0.01\"} 3\n\
             marekvs_operator_reconcile_duration_seconds_bucket{le=\"0.1\"} 5\n\
             marekvs_operator_reconcile_duration_seconds_bucket{le=\"1\"} 5\n"
        );
        // 5 observations in the window: 2.5 are ≤ 0.01 (3), 4.95 only ≤ 0.1 (5).
        assert_eq!(histogram_quantile(&diff, DURATION, 0.5), 0.01);
        assert_eq!(histogram_quantile(&diff, DURATION, 0.99), 0.1);
        // Nothing before: the buckets as they are.
        let all = diff_histogram(OPERATOR, "", QUEUE_WAIT);
        assert_eq!(all.lines().count(), 5);
        assert!(
            all.contains("marekvs_operator_reconcile_queue_wait_seconds_bucket{le=\"+Inf\"} 12\n")
        );
    }

    const API_BEFORE: &str = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 100
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 5
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 20
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 50
apiserver_request_total{code="200",resource="events",subresource="",verb="POST"} 9
"#;

    const API_AFTER: &str = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 160
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 8
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 26
apiserver_request_total{code="200",resource="pods",subresource="",verb="DELETE"} 2
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 54
apiserver_request_total{code="200",resource="events",subresource="",verb="POST"} 9
"#;

    #[test]
    fn grew_by_label_keeps_what_grew() {
        assert_eq!(
            grew_by_label(API_BEFORE, API_AFTER, "apiserver_request_total", "verb"),
            counts(&[
                ("DELETE", 2.0),
                ("GET", 60.0),
                ("PATCH", 6.0),
                ("POST", 3.0),
                ("PUT", 4.0)
            ])
        );
    }

    #[test]
    fn apiserver_writes_count_write_verbs_by_resource() {
        // Pods: POST +3, PATCH of status +6, DELETE +2 (GET +60 is a read); leases PUT +4;
        // events did not grow.
        let (n, by) = apiserver_writes(API_BEFORE, API_AFTER);
        assert_eq!(by, counts(&[("leases", 4.0), ("pods", 11.0)]));
        assert_eq!(n, 15.0);
    }
}
