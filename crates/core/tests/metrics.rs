//! The metrics parser on hostile input: members are not trusted to answer well.

use std::cell::Cell;

use marekvs_core::metrics::parse_scrape;
use proptest::prelude::*;

const GOOD: &str = "marekvs_cluster_members 3\nmarekvs_cluster_underreplicated_partitions 0\n\
    marekvs_join_gate_pending_pids 0\nmarekvs_bootstraps_completed_total 10\n\
    marekvs_ae_repair_ops_total 2\nmarekvs_commands_total{cmd=\"get\"} 5\n";

/// Two runners for a property whose inputs must reach certain cases: one over a fixed seed,
/// whose reach is asserted (the same in every run), and one drawn at random, in addition (new
/// inputs every run), whose reach is only reported. `true` marks the fixed one.
fn fixed_then_random() -> [(proptest::test_runner::TestRunner, bool); 2] {
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let config = || ProptestConfig {
        cases: 2000,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let fixed = TestRng::from_seed(RngAlgorithm::ChaCha, &[41; 32]);
    [
        (TestRunner::new_with_rng(config(), fixed), true),
        (TestRunner::new(config()), false),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn the_parser_never_panics_on_garbage(body in prop::collection::vec(any::<u8>(), 0..4096)) {
        let text = String::from_utf8_lossy(&body);
        let _ = parse_scrape(&text);
    }

    /// A valid body with random damage (a cut, a byte flipped, junk inserted) either parses to
    /// figures that were in the body, or is unknown; it never invents a gate figure.
    #[test]
    fn damage_never_invents_figures(cut in 0usize..400, at in 0usize..400, junk in "[ -~{}\"\\n]{0,40}") {
        let mut text = GOOD.to_string();
        let at = at.min(text.len());
        text.insert_str(at, &junk);
        let cut = cut.min(text.len());
        let text = &text[..cut.max(at.min(text.len()))];
        if let Some(s) = parse_scrape(text) {
            // Every gate figure that came out is a sample of the damaged body: the view as
            // written, the under-replication gauge as written or rounded up.
            let view = format!("marekvs_cluster_members {}", s.view_members);
            prop_assert!(text.contains(&view), "{} not in {:?}", view, text);
            let under = "marekvs_cluster_underreplicated_partitions";
            let written = text.lines().filter(|l| l.contains(under)).any(|l| {
                l.split_whitespace()
                    .filter_map(|v| v.parse::<f64>().ok())
                    .any(|v| v.ceil() == s.underreplicated as f64)
            });
            prop_assert!(written, "{} {} not in {:?}", under, s.underreplicated, text);
        }
    }
}

/// The figures every test body carries, without the gauges under test.
const REST: &str = "marekvs_cluster_members 3\nmarekvs_bootstraps_completed_total 10\n\
    marekvs_ae_repair_ops_total 2\n";

/// The gauges the gate blocks on, each read as the largest of its samples, rounded up.
const BLOCKING: [&str; 2] = [
    "marekvs_cluster_underreplicated_partitions",
    "marekvs_join_gate_pending_pids",
];

/// A body with `samples` of `name`, one label set each, in this order, the other blocking
/// gauge at 0.
fn body(name: &str, samples: &[f64]) -> String {
    let mut out = REST.to_string();
    for other in BLOCKING.iter().filter(|o| **o != name) {
        out.push_str(&format!("{other} 0\n"));
    }
    for (i, v) in samples.iter().enumerate() {
        out.push_str(&format!("{name}{{shard=\"{i}\"}} {v}\n"));
    }
    out
}

/// A gauge sample: a whole number, or one with a fraction in (0, 1).
fn sample() -> impl Strategy<Value = f64> {
    (0u64..100_000, prop_oneof![Just(0u32), 1u32..1_000_000])
        .prop_map(|(whole, millionths)| whole as f64 + f64::from(millionths) / 1e6)
}

fn gauge(name: &str, samples: &[f64]) -> u64 {
    let s = parse_scrape(&body(name, samples)).expect("a valid body parses");
    match name {
        "marekvs_cluster_underreplicated_partitions" => s.underreplicated,
        "marekvs_join_gate_pending_pids" => s.join_pending,
        _ => unreachable!(),
    }
}

/// For any samples in any order, a blocking gauge reads as their maximum rounded up: never
/// the last sample, never a fraction cut to a lower number. The generator is checked to
/// produce several samples and fractions.
#[test]
fn a_blocking_gauge_is_the_maximum_of_its_samples_in_any_order() {
    let strategy = prop::collection::vec(sample(), 1..8)
        .prop_flat_map(|s| (Just(s.clone()), Just(s).prop_shuffle()));
    for (mut runner, fixed) in fixed_then_random() {
        // Counted in the cases run (a test runner's closure is `Fn`).
        let (multi, fractional) = (Cell::new(0u32), Cell::new(0u32));
        runner
            .run(&strategy, |(samples, shuffled)| {
                multi.set(multi.get() + u32::from(samples.len() > 1));
                fractional
                    .set(fractional.get() + u32::from(samples.iter().any(|v| v.fract() != 0.0)));
                let max = samples.iter().copied().fold(0.0, f64::max).ceil() as u64;
                for name in BLOCKING {
                    prop_assert_eq!(gauge(name, &samples), max, "{} of {:?}", name, samples);
                    prop_assert_eq!(gauge(name, &shuffled), max, "{} of {:?}", name, shuffled);
                }
                Ok(())
            })
            .unwrap();
        let (multi, fractional) = (multi.get(), fractional.get());
        eprintln!(
            "2000 cases (fixed seed: {fixed}): {multi} with several samples, {fractional} with a fraction"
        );
        if fixed {
            assert!(multi > 0, "no case had several samples");
            assert!(fractional > 0, "no case had a fraction");
        }
    }
}

/// Any fraction in (0, 1), alone or beside zeros, reads as at least 1: never as 0.
#[test]
fn a_fraction_of_a_blocking_gauge_never_reads_as_zero() {
    let fraction = (0.0f64..1.0).prop_filter("in (0, 1)", |f| *f > 0.0);
    let strategy = (fraction, 0usize..4, 0usize..4);
    for (mut runner, fixed) in fixed_then_random() {
        let (beside_zeros, tiny) = (Cell::new(0u32), Cell::new(0u32));
        runner
            .run(&strategy, |(f, zeros_before, zeros_after)| {
                beside_zeros.set(beside_zeros.get() + u32::from(zeros_before + zeros_after > 0));
                tiny.set(tiny.get() + u32::from(f < 0.01));
                let mut samples = vec![0.0; zeros_before];
                samples.push(f);
                samples.extend(std::iter::repeat_n(0.0, zeros_after));
                for name in BLOCKING {
                    prop_assert!(gauge(name, &samples) >= 1, "{} of {:?}", name, samples);
                }
                let stopped = parse_scrape(&format!(
                    "{}marekvs_disk_write_stopped {f}\n",
                    body(BLOCKING[0], &[0.0])
                ))
                .unwrap();
                prop_assert!(stopped.write_stopped, "write_stopped {}", f);
                Ok(())
            })
            .unwrap();
        let (beside_zeros, tiny) = (beside_zeros.get(), tiny.get());
        eprintln!(
            "2000 cases (fixed seed: {fixed}): {beside_zeros} beside zeros, {tiny} below 0.01"
        );
        if fixed {
            assert!(beside_zeros > 0, "no fraction beside zeros");
        }
    }
}
