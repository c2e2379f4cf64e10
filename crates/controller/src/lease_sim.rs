//! Leader election simulated: three candidates whose wall clocks are 2 lease durations ahead,
//! right, and 2 behind share one in-memory Lease with conditional writes, and run the real
//! [`Elector`] on tokio's paused (virtual) clock. Every call to the Lease may stall — before it
//! reaches the store, or after it was applied and before the answer arrives — now and then for
//! longer than a lease (a stalled process); leaders are also killed (no release) or shut down
//! (release) at random and come back later. A candidate acts from the moment `acquire` returns
//! to the moment `hold` returns (or it is killed). At no instant may two act.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use marekvs_core::rng::SplitMix64;
use tokio::time::Instant;

use crate::lease::{Elector, LeaseStore};

const L: Duration = Duration::from_secs(3);
const SKEWS: [i32; 3] = [2, 0, -2];

/// The draws of the simulation, over the core's seeded generator.
trait Draws {
    fn millis(&mut self, from: u64, to: u64) -> Duration;
    fn leg(&mut self) -> Duration;
}

impl Draws for SplitMix64 {
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }

    /// How long one leg of a call takes: mostly quick, sometimes slow, rarely a stall longer
    /// than the lease.
    fn leg(&mut self) -> Duration {
        let l = L.as_millis() as u64;
        match self.below(1000) {
            0..=4 => self.millis(l / 2, 3 * l),
            5..=49 => self.millis(30, 800),
            _ => self.millis(0, 30),
        }
    }
}

#[derive(Default)]
struct Counts {
    reads: u64,
    writes: u64,
    conflicts: u64,
    stalls: u64,
    takeovers_after_expiry: u64,
    takeovers_after_release: u64,
    lost_by_deadline: u64,
    lost_to_another: u64,
    killed: u64,
    released: u64,
    /// Intervals of acting, in the order they ended: (who, from, to, how it ended).
    acting: Vec<(usize, Instant, Instant, End)>,
    /// Who acts now, since when.
    now_acting: Vec<Option<Instant>>,
    overlaps: Vec<String>,
}

struct World {
    lease: Option<Lease>,
    resource_version: u64,
    rng: SplitMix64,
    counts: Counts,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// `hold` gave up: no renewal within the renew deadline.
    Deadline,
    /// `hold` found someone else holding the Lease.
    Deposed,
    Killed,
    Released,
    /// Still acting when the simulation ended.
    Running,
}

#[derive(Clone)]
struct Store(Arc<Mutex<World>>);

impl Store {
    async fn leg(&self) {
        let d = {
            let mut w = self.0.lock().unwrap();
            let d = w.rng.leg();
            if d >= L / 2 {
                w.counts.stalls += 1;
            }
            d
        };
        tokio::time::sleep(d).await;
    }

    /// Apply a write if `lease` was read at the current resourceVersion (or, to create,
    /// if there is none).
    fn write(&self, lease: &Lease, create: bool) -> bool {
        let mut w = self.0.lock().unwrap();
        w.counts.writes += 1;
        let current = w
            .lease
            .as_ref()
            .map(|l| l.metadata.resource_version.clone());
        let fits = match (&current, create) {
            (None, true) => true,
            (Some(rv), false) => *rv == lease.metadata.resource_version,
            _ => false,
        };
        if !fits {
            w.counts.conflicts += 1;
            return false;
        }
        let before = w
            .lease
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
            .unwrap_or_default();
        let after = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        if before != after && !after.is_empty() {
            if before.is_empty() {
                w.counts.takeovers_after_release += 1;
            } else {
                w.counts.takeovers_after_expiry += 1;
            }
        }
        w.resource_version += 1;
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(w.resource_version.to_string());
        w.lease = Some(stored);
        true
    }
}

impl LeaseStore for Store {
    async fn get(&self) -> anyhow::Result<Option<Lease>> {
        self.leg().await;
        let lease = {
            let mut w = self.0.lock().unwrap();
            w.counts.reads += 1;
            w.lease.clone()
        };
        self.leg().await;
        Ok(lease)
    }

    async fn create(&self, lease: &Lease) -> anyhow::Result<bool> {
        self.leg().await;
        let ok = self.write(lease, true);
        self.leg().await;
        Ok(ok)
    }

    async fn replace(&self, lease: &Lease) -> anyhow::Result<bool> {
        self.leg().await;
        let ok = self.write(lease, false);
        self.leg().await;
        Ok(ok)
    }
}

fn start_acting(store: &Store, who: usize) {
    let now = Instant::now();
    let mut w = store.0.lock().unwrap();
    let c = &mut w.counts;
    for (other, since) in c.now_acting.iter().enumerate() {
        if let Some(since) = since {
            let msg = format!("c{who} starts acting while c{other} acts (since {since:?})");
            c.overlaps.push(msg);
        }
    }
    c.now_acting[who] = Some(now);
}

fn stop_acting(store: &Store, who: usize, end: End) {
    let now = Instant::now();
    let mut w = store.0.lock().unwrap();
    let c = &mut w.counts;
    if let Some(since) = c.now_acting[who].take() {
        c.acting.push((who, since, now, end));
        match end {
            End::Deadline => c.lost_by_deadline += 1,
            End::Deposed => c.lost_to_another += 1,
            End::Killed => c.killed += 1,
            End::Released => c.released += 1,
            End::Running => {}
        }
    }
}

/// One candidate, restarted (same identity, as a container in its pod) each time it stops.
async fn candidate(store: Store, who: usize, base: Instant, seed: u64) {
    let base_wall = Timestamp::from_second(1_800_000_000).unwrap();
    let skew = SignedDuration::try_from(L).unwrap() * SKEWS[who];
    let mut rng = SplitMix64(seed);
    loop {
        let wall = Box::new(move || {
            let elapsed = SignedDuration::try_from(Instant::now() - base).unwrap();
            base_wall.checked_add(elapsed + skew).unwrap()
        });
        let elector = Elector::with_store(store.clone(), "lease", &format!("c{who}"), L, wall);
        let term_start = elector.acquire().await;
        start_acting(&store, who);
        let lifetime = rng.millis(L.as_millis() as u64 / 2, 8 * L.as_millis() as u64);
        let release = rng.below(4) == 0;
        let lost = tokio::select! {
            biased;
            lost = elector.hold(term_start) => Some(lost),
            () = tokio::time::sleep(lifetime) => None,
        };
        let end = match &lost {
            Some(why) if why.contains("held by another") => End::Deposed,
            Some(_) => End::Deadline,
            None if release => End::Released,
            None => End::Killed,
        };
        stop_acting(&store, who, end);
        if lost.is_none() && release {
            elector.release().await;
        }
        // Down for a while before the restart.
        tokio::time::sleep(rng.millis(0, 2 * L.as_millis() as u64)).await;
    }
}

fn run(seed: u64, minutes: u64) -> Counts {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store(Arc::new(Mutex::new(World {
            lease: None,
            resource_version: 0,
            rng: SplitMix64(seed),
            counts: Counts {
                now_acting: vec![None; SKEWS.len()],
                ..Counts::default()
            },
        })));
        let base = Instant::now();
        let end = base + Duration::from_secs(60 * minutes);
        let tasks: Vec<_> = (0..SKEWS.len())
            .map(|who| {
                let seed = seed.wrapping_mul(31).wrapping_add(who as u64 + 1);
                tokio::spawn(tokio::time::timeout_at(
                    end,
                    candidate(store.clone(), who, base, seed),
                ))
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap().is_err(), "candidates run until the end");
        }
        for who in 0..SKEWS.len() {
            stop_acting(&store, who, End::Running);
        }
        let mut w = store.0.lock().unwrap();
        std::mem::take(&mut w.counts)
    })
}

#[test]
fn candidates_with_clocks_two_leases_apart_never_act_at_once() {
    let (seeds, minutes) = (10, 30);
    let mut total = Counts::default();
    let mut handovers = 0;
    // The shortest time from a leader giving up (deadline or deposed) to the next one acting.
    let mut min_gap = Duration::MAX;
    let mut acted = Duration::ZERO;
    for seed in 0..seeds {
        let mut c = run(seed, minutes);
        assert!(
            c.overlaps.is_empty(),
            "seed {seed}: {} overlaps, first: {}",
            c.overlaps.len(),
            c.overlaps[0]
        );
        c.acting.sort_by_key(|&(_, from, _, _)| from);
        for pair in c.acting.windows(2) {
            let ((a, _, a_to, a_end), (b, b_from, _, _)) = (pair[0], pair[1]);
            assert!(a_to <= b_from, "seed {seed}: overlapping terms");
            if a != b {
                handovers += 1;
                if matches!(a_end, End::Deadline | End::Deposed) {
                    min_gap = min_gap.min(b_from - a_to);
                }
            }
        }
        acted += c.acting.iter().map(|&(_, f, t, _)| t - f).sum::<Duration>();
        total.reads += c.reads;
        total.writes += c.writes;
        total.conflicts += c.conflicts;
        total.stalls += c.stalls;
        total.takeovers_after_expiry += c.takeovers_after_expiry;
        total.takeovers_after_release += c.takeovers_after_release;
        total.lost_by_deadline += c.lost_by_deadline;
        total.lost_to_another += c.lost_to_another;
        total.killed += c.killed;
        total.released += c.released;
        total.acting.extend(c.acting);
    }
    let span = Duration::from_secs(60 * minutes * seeds);
    eprintln!(
        "lease sim: {seeds} seeds x {minutes} min virtual, lease {L:?}, wall skews {SKEWS:?} leases: \
         {} terms, {handovers} handovers ({} after expiry, {} after release), \
         terms ended: {} renew deadline, {} found another holder, {} killed, {} released; \
         {} stalls > lease/2, {} reads, {} writes ({} conflicts); \
         someone acted {:.1}% of the time; shortest gap from a leader giving up to the next acting \
         {min_gap:?}",
        total.acting.len(),
        total.takeovers_after_expiry,
        total.takeovers_after_release,
        total.lost_by_deadline,
        total.lost_to_another,
        total.killed,
        total.released,
        total.stalls,
        total.reads,
        total.writes,
        total.conflicts,
        100.0 * acted.as_secs_f64() / span.as_secs_f64(),
    );
    assert!(handovers > 0, "no handover: the simulation proved nothing");
    // A candidate waits a lease from a change made after the holder's term began, and the
    // holder stops a renew deadline (2/3 of it) after that: a third of a lease apart, less the
    // timer's millisecond.
    assert!(min_gap + Duration::from_millis(1) >= L / 3, "{min_gap:?}");
    assert!(total.takeovers_after_expiry > 0 && total.lost_by_deadline > 0);
}
