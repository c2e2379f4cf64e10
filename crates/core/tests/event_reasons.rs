//! Every Event reason the operator can give is documented for users, under its own name.

use marekvs_core::EventReason;

#[test]
fn every_event_reason_is_documented_in_the_api_reference() {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md"))
        .expect("docs/api.md");
    let events = api
        .split("\n## Events\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Events section in docs/api.md");
    let missing: Vec<&str> = EventReason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !events.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "Event reasons missing from docs/api.md's Events section: {missing:?}"
    );
    // The text an Event carries is the variant's name, and compares as such.
    assert_eq!(EventReason::MemberRemoved.as_str(), "MemberRemoved");
    assert!(EventReason::MemberRemoved == "MemberRemoved");
    assert_eq!(format!("{:?}", EventReason::Paused), "\"Paused\"");
}
