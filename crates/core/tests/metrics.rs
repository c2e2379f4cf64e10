//! The metrics parser on hostile input: members are not trusted to answer well.

use marekvs_core::metrics::parse_scrape;
use proptest::prelude::*;

const GOOD: &str = "marekvs_cluster_members 3\nmarekvs_cluster_underreplicated_partitions 0\n\
    marekvs_join_gate_pending_pids 0\nmarekvs_bootstraps_completed_total 10\n\
    marekvs_ae_repair_ops_total 2\nmarekvs_commands_total{cmd=\"get\"} 5\n";

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
            // Every gate figure that came out must appear as written in the damaged body.
            let view = format!("marekvs_cluster_members {}", s.view_members);
            let under = format!("marekvs_cluster_underreplicated_partitions {}", s.underreplicated);
            prop_assert!(text.contains(&view), "{} not in {:?}", view, text);
            prop_assert!(text.contains(&under), "{} not in {:?}", under, text);
        }
    }
}
