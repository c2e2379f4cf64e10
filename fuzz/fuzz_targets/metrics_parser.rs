//! The metrics parser against whatever a member (or something pretending to be one) answers.
//! Beyond "never panics": a scrape that parses must have every gate figure present in the
//! body, the disk figures must be consistent, and comments must change nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use marekvs_core::metrics::parse_scrape;

const GATE_FIGURES: [&str; 5] = [
    "marekvs_cluster_members",
    "marekvs_cluster_underreplicated_partitions",
    "marekvs_join_gate_pending_pids",
    "marekvs_bootstraps_completed_total",
    "marekvs_ae_repair_ops_total",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = parse_scrape(&text);
    if let Some(s) = &parsed {
        for name in GATE_FIGURES {
            assert!(text.contains(name), "{name} came out of a body without it");
        }
        if let Some(disk) = &s.disk {
            assert!(disk.total_bytes > 0 && disk.used_bytes <= disk.total_bytes);
        }
    }
    // Comment lines are ignored wherever they appear.
    let commented = format!("# HELP x y\n{text}\n# TYPE z counter\n");
    assert_eq!(parse_scrape(&commented), parsed);
});
