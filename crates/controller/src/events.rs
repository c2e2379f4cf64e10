//! Publishing Events (`events.k8s.io/v1`) so that a series only ever repeats one note.
//!
//! kube's `Recorder` folds every Event with the same reason, object and `related` into one
//! series and keeps the first note: after 5 → 3, `kubectl describe` showed "demo-4 removed
//! (x2)" although the second removal was demo-3. Here a series is keyed by the note itself as
//! well, so two notes are two Events, and the Event about a member names its pod in `related`.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use marekvs_core::EventKind;

/// An identical note published again within this long joins the earlier Event's series
/// (kube's recorder uses the same span); later, it is a new Event.
const SERIES_SPAN: SignedDuration = SignedDuration::from_secs(6 * 60);

/// What makes two Events one series: everything they show, the note included.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    pub regarding_uid: String,
    pub related: Option<String>,
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// Whether to create an Event or add one to an existing series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publish {
    Create,
    Repeat { name: String, count: i32 },
}

#[derive(Clone, Debug)]
struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

/// The series published in the last `SERIES_SPAN` (pure: the clock is passed in).
#[derive(Debug, Default)]
pub struct SeriesBook {
    series: HashMap<SeriesKey, Published>,
}

impl SeriesBook {
    /// What publishing `key` at `now` should do. Call `published` once it is done.
    pub fn next(&mut self, key: &SeriesKey, now: Timestamp) -> Publish {
        self.series.retain(|_, p| p.last + SERIES_SPAN > now);
        match self.series.get(key) {
            Some(p) => Publish::Repeat {
                name: p.name.clone(),
                count: p.count + 1,
            },
            None => Publish::Create,
        }
    }

    /// Record an Event as published (`name` is the Event object's).
    pub fn published(&mut self, key: SeriesKey, name: String, count: i32, now: Timestamp) {
        self.series.insert(
            key,
            Published {
                name,
                count,
                last: now,
            },
        );
    }
}

/// The operator's Event publisher.
pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    book: Mutex<SeriesBook>,
}

/// One Event to publish.
pub struct Note<'a> {
    pub kind: EventKind,
    pub reason: &'a str,
    pub message: &'a str,
    /// The member's pod the note is about, if it is about one.
    pub related: Option<ObjectReference>,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Events {
            client,
            controller: controller.into(),
            instance: instance.unwrap_or_else(|| controller.into()),
            book: Mutex::new(SeriesBook::default()),
        }
    }

    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        note: Note<'_>,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let message = cut_note(note.message);
        let key = SeriesKey {
            regarding_uid: regarding.uid.clone().unwrap_or_default(),
            related: note.related.as_ref().and_then(|r| r.name.clone()),
            warning: note.kind == EventKind::Warning,
            reason: note.reason.into(),
            note: message.clone(),
        };
        let next = self.book.lock().expect("event book").next(&key, now);
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let (name, count) = match next {
            Publish::Create => {
                let event = self.event(regarding, &note, message, now);
                let made = api.create(&PostParams::default(), &event).await?;
                (made.metadata.name.unwrap_or_default(), 1)
            }
            Publish::Repeat { name, count } => {
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                };
                let patch = serde_json::json!({"series": series});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                (name, count)
            }
        };
        self.book
            .lock()
            .expect("event book")
            .published(key, name, count, now);
        Ok(())
    }

    fn event(
        &self,
        regarding: &ObjectReference,
        note: &Note<'_>,
        message: String,
        now: Timestamp,
    ) -> Event {
        let object = regarding.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(note.reason.into()),
            reason: Some(note.reason.into()),
            note: Some(message),
            type_: Some(
                match note.kind {
                    EventKind::Normal => "Normal",
                    EventKind::Warning => "Warning",
                }
                .into(),
            ),
            regarding: Some(regarding.clone()),
            related: note.related.clone(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

/// The API server refuses an Event whose note is longer than this many bytes (not characters:
/// a note of 1,000 characters with a few arrows in it is refused, and the Event is lost).
pub const NOTE_MAX_BYTES: usize = 1024;

/// `message` as a note the API server takes: whole if it fits in [`NOTE_MAX_BYTES`], else cut
/// on a character boundary and ended with "…", so a reader sees it was cut.
pub fn cut_note(message: &str) -> String {
    marekvs_api::conditions::cut_text(message, NOTE_MAX_BYTES)
}

/// The member a note names: the single `<cluster>-<ordinal>` among its words, if exactly one
/// member is named (a note about two members, e.g. a partition report, has none).
pub fn member_named(cluster: &str, message: &str) -> Option<u32> {
    let prefix = format!("{cluster}-");
    let mut named = message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter_map(|word| word.strip_prefix(&prefix))
        .filter_map(|ordinal| {
            let canonical = ordinal == "0" || !ordinal.starts_with('0');
            canonical.then(|| ordinal.parse::<u32>().ok()).flatten()
        })
        .collect::<Vec<_>>();
    named.sort_unstable();
    named.dedup();
    match named.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(note: &str, related: Option<&str>) -> SeriesKey {
        SeriesKey {
            regarding_uid: "uid-1".into(),
            related: related.map(str::to_string),
            warning: false,
            reason: "MemberRemoved".into(),
            note: note.into(),
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn a_note_is_cut_at_the_api_servers_byte_limit_on_a_character_boundary() {
        let short = "demo-4 removed";
        assert_eq!(cut_note(short), short);
        let exact = "a".repeat(NOTE_MAX_BYTES);
        assert_eq!(cut_note(&exact), exact);
        // 1,000 characters of 3 bytes each: the old cut by characters kept all 3,000 bytes.
        for long in [
            "→".repeat(1000),
            format!("x{}", "→".repeat(400)),
            "é".repeat(700),
        ] {
            let cut = cut_note(&long);
            assert!(cut.len() <= NOTE_MAX_BYTES, "{} bytes", cut.len());
            assert!(
                cut.len() > NOTE_MAX_BYTES - 4,
                "cut too short: {} bytes",
                cut.len()
            );
            assert!(cut.ends_with('…'));
            assert!(long.starts_with(cut.trim_end_matches('…')));
        }
    }

    /// The reported bug: two removals, of demo-4 then demo-3, are two Events, not one series.
    #[test]
    fn notes_about_different_members_are_never_one_series() {
        let mut book = SeriesBook::default();
        let four = key("demo-4 removed", Some("demo-4"));
        let three = key("demo-3 removed", Some("demo-3"));
        assert_eq!(book.next(&four, at(0)), Publish::Create);
        book.published(four.clone(), "demo.1".into(), 1, at(0));
        assert_eq!(book.next(&three, at(30)), Publish::Create);
        book.published(three.clone(), "demo.2".into(), 1, at(30));
        // Even with the same member, another note is another Event.
        let other = key("demo-4 removed again", Some("demo-4"));
        assert_eq!(book.next(&other, at(31)), Publish::Create);
    }

    #[test]
    fn the_same_note_again_repeats_its_series_within_the_span_only() {
        let mut book = SeriesBook::default();
        let k = key("demo-4 removed", Some("demo-4"));
        assert_eq!(book.next(&k, at(0)), Publish::Create);
        book.published(k.clone(), "demo.1".into(), 1, at(0));
        let again = book.next(&k, at(60));
        assert_eq!(
            again,
            Publish::Repeat {
                name: "demo.1".into(),
                count: 2
            }
        );
        book.published(k.clone(), "demo.1".into(), 2, at(60));
        // The span counts from the last one.
        assert_eq!(
            book.next(&k, at(60 + 359)),
            Publish::Repeat {
                name: "demo.1".into(),
                count: 3
            }
        );
        assert_eq!(book.next(&k, at(60 + 360)), Publish::Create);
    }

    #[test]
    fn the_member_a_note_names() {
        assert_eq!(member_named("demo", "demo-4 removed"), Some(4));
        assert_eq!(member_named("demo", "removing demo-10: drained"), Some(10));
        assert_eq!(member_named("demo", "data-demo-3 has been away"), None);
        assert_eq!(
            member_named("demo", "data-demo-3 of demo-3 was adopted"),
            Some(3)
        );
        assert_eq!(
            member_named("demo", "demo-1 sees demo-2 but not demo-0"),
            None
        );
        assert_eq!(member_named("demo", "demo-01 is not a member name"), None);
        assert_eq!(member_named("demo", "3 members: every one is ready"), None);
        // Another cluster whose name starts with this one's.
        assert_eq!(member_named("demo", "demo-x-2 removed"), None);
    }
}
