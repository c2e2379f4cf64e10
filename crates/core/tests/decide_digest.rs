//! An oracle for `decide`: many generated inputs, each decision folded into one digest.
//!
//! The inputs come from a seeded generator (no proptest: its RNG may change between versions,
//! and the digest must not), in short chains where each decision's memory is the next input's
//! memory. Observations start from a healthy cluster consistent with the memory (so the
//! hand-off gate passes often enough to reach every step) and are then disturbed: pods missing,
//! unready, terminating, drained, outdated or asking for a fresh volume; volumes missing, terminating or outdated; scrapes
//! missing or showing under-replication, pending joins, diverged views or moving counters;
//! under load, client traffic cut, and the leaver's anti-entropy rounds, RESP input and uptime
//! moving on, showing client input or a restart, or unknown.
//!
//! The digest covers everything a decision says, rendered without depending on how `Memory`
//! lays out the removal and the rollout. A change to the digest is a change of behaviour.
//! Each branch of `decide` that the generator is meant to reach is counted and asserted
//! reached, so the digest cannot hold vacuously.

use std::collections::{BTreeMap, BTreeSet};

use marekvs_core::rng::SplitMix64;
use marekvs_core::*;

/// How many `decide` calls the digest covers.
const INPUTS: usize = 200_000;
/// The share of chains (percent) under load (`Shape::load`).
const LOAD_PCT: u64 = 40;
/// The digest of the decisions over those inputs (FNV-1a, 64 bits). Changed on purpose:
/// - `0x9738_b6d6_f514_d446` → `0x40f7_2b0f_f2b1_92c6`: a drained member that is not the one
///   disrupted (a cancelled removal's victim) is recycled only when no removal or rollout is in
///   progress, and no removal or rollout starts beside it (the stepper property found a rollout
///   deleting a pod in the same pass as a recycle: two pods at once).
/// - `0x40f7_2b0f_f2b1_92c6` → `0x67ce_e5aa_1caf_6744`: the generator reaches a new input kind,
///   pods asking for a fresh volume (`PodObs::replace_volume`) and rollouts recording one
///   (`RollReason::VolumeRequested`), drawn from a second generator. With both at 0 % the
///   digest is still `0x40f7_2b0f_f2b1_92c6`: no decision over the earlier inputs changed.
/// - `0x67ce_e5aa_1caf_6744` → `0x634f_71fa_435d_8083`: a rollout that drains its member again
///   (its node restarted and served since the hand-off) forgets the earlier hand-off, so a pod
///   lost before the new one no longer lets the volume be deleted on the strength of the old.
/// - `0x634f_71fa_435d_8083` → `0xf45d_ff86_f385_bc1a`: a new output, not a changed decision:
///   the projection now includes `Decision::plan` (`status.plan`, the removals that would come
///   next and what holds each). With the plan left out of the projection the digest is still
///   `0x634f_71fa_435d_8083`: no action, memory, phase, block, note or pace changed.
/// - `0xf45d_ff86_f385_bc1a` → `0xecbf_05bc_63ef_6c3e` (alone, over `0x634f_71fa_435d_8083`, it
///   gave `0x4800_6be6_2409_1fb4`): a mass failure (replicationFactor or
///   more members that held data without a ready pod, `mass::mass_failure`) holds every fresh
///   volume of such a member, every member added or removed, drain, pod and volume deletion;
///   only pods on their own volumes are re-created, and the progress says what is held.
/// - `0xecbf_05bc_63ef_6c3e` → `0xf3b8_86e0_0679_143e`: views by identity (issue 15, item 2).
///   Every observation now carries each member's view by identity, mirroring its count (with
///   only those, no decision changed: the digest stayed `0xecbf_05bc_63ef_6c3e`). A third
///   generator makes a ready member's view hold a stranger in place of a member (the same
///   count), drops a view read over RESP, and starts chains with a remembered disagreement:
///   the hand-off gate holds on views that differ by identity or were not read, disagreeing
///   views hold every drain, pod and volume deletion and every new removal or restart, 30 s
///   of disagreement is a suspected partition, and the projection shows `views_split_since`
///   and the suspected partition when there is one. With that generator at 0 % the digest is
///   still `0xecbf_05bc_63ef_6c3e`.
/// - `0xecbf_05bc_63ef_6c3e` → `0x87a3_b560_8875_189e` (alone), and with views by identity
///   `0xf3b8_86e0_0679_143e` → `0x8a00_fd56_9d8e_d764` (the two together): a removal cancelled past its hand-off
///   (step `Deleting` or later: the others hold the victim's data) brings the victim back as a
///   new member, phase `Joining` instead of `Replacing`, so a mass failure does not count it as
///   down and its stale volume may be replaced (the DST found an RF 1 cluster held for good by
///   a cancelled victim whose kept volume went stale). Stale volumes themselves (`stale`) are
///   not generated here: with that change undone the digest is still `0xecbf_05bc_63ef_6c3e`.
/// - `0x8a00_fd56_9d8e_d764` → `0x97d9_9bd2_6a9b_4027`: the simulated views' member
///   addresses (`View::of_ordinals`) are loopback (`127.0.0.<ordinal>`), not `10.0.0.<ordinal>`;
///   they appear in the messages naming who sees whom. No decision changed: with the old
///   addresses the digest is `0x8a00_fd56_9d8e_d764`.
/// - `0x97d9_9bd2_6a9b_4027` → `0xeb0f_5cc0_01c6_9b46`: hand-off gate v2 (issue 17). The
///   victim of a removal or restart gets `SetClientTraffic` off with its record and again
///   while its pod is not seen off, another member's pod seen off gets it on; the hand-off
///   holds `LeaverBacklog` until the leaver's traffic is cut and its ring is known, empty and
///   quiet for the settle window (the start check: its ring known); repairs explained by a
///   busy ring no longer hold; the projection shows `Decision::hold` and
///   `Decision::background_repair`, with `HandoffHeld`/`HandoffStuck` notes. Over the old
///   inputs (the load generator at 0 %) the digest is `0xa4cd_3151_adf4_dd1e`: the old
///   inputs never cut a leaver's traffic, so no removal passes its hand-off there any more,
///   and the branches asserted reached need the fourth generator (`Shape::load`: rings busy
///   or unknown, traffic labels, repair rates, rings last busy lately).
/// - `0xeb0f_5cc0_01c6_9b46` → `0x6d56_d8d2_72c3_e539`: a removal or restart at step
///   `Deleting` whose pod was not deleted yet (held, or the operator stopped) goes back to
///   `HandingOff` when the leaver's ring does not read a known 0 in this pass: a client
///   writing to it directly may have filled it since the hand-off passed (the DST's seed 8101
///   of the old gate).
/// - `0x6d56_d8d2_72c3_e539` → `0x7b9e_5c03_9f1b_e01b`: hand-off gate v3 (the leaver's own
///   anti-entropy rounds since it went quiet, `handoff::rounds_needed`), with the new figures
///   in the fourth generator (`loaded`, `loaded_samples`): rounds, RESP input bytes and the
///   operator's own view-read bytes, write commands and uptime, consistent with the remembered
///   sample most of the time, at times showing client input, a restart or an unknown figure;
///   the samples remember rounds, input, view digest, writes and since when (and why) the
///   member is quiet. Decisions changed: the leaver holds `LeaverBacklog` on client input,
///   too few rounds, or an unknown figure (the ring figure is shown only); repairs hold
///   nothing; `Deleting` goes back to `HandingOff` when the leaver is no longer known to be
///   covered; replicationFactor 1 refuses removals and fresh volumes (`SingleCopy`), and (a
///   fix found by the DST) a rolling update over a volume the spec cannot keep too, a restart
///   in progress keeping its volume. Over the old inputs (the load generator at 0 %) the
///   digest is `0xbce4_0d59_be74_9765` (`0x1edb_9093_93f8_843c` without that fix); with the new
///   generator and without the fix it is `0x47c1_d540_7141_ebe7`. The branches
///   `hold LeaverBacklog ReplicationRing` and `hold RepairInProgress Repairs` no longer exist.
/// - `0x7b9e_5c03_9f1b_e01b` → `0x917f_f0af_a68c_d789`: the client input reaches the core as
///   the shell's ledger hands it over (`MemberObs::client_input`, client bytes since the last
///   recorded pass, `input.rs`) instead of the node's input counter less the operator's own
///   bytes worked out from the sample; the sample no longer remembers input bytes. The
///   generator draws that figure (unknown 4 %, a client's bytes 15 %, none otherwise), and
///   `Scrape::default` reads a settled member (1,000 rounds, up for long) while `Sample::new`
///   is quiet at round 0. With the load generator at 0 % the run stops on branches never
///   reached (the hand-off's passing branches need the fourth generator, as under gate v2).
/// - `0x917f_f0af_a68c_d789` → `0x8b0e_88e7_7631_0d42`: the join-gate figure of a ready member
///   holds nothing (a real node's stays above 0 after a later view change when a donor never
///   answers); `JoinPending` now names unready members that are all still joining, instead of
///   `NotAllReady`.
/// - `0x8b0e_88e7_7631_0d42` → `0x182f_9255_c6f8_7c28`: a fresh-volume restart past its hand-off keeps the
///   old volume while another member that held data has no ready pod (DST seed 6734), and a
///   stale volume of that restart's own member is gated over every other member.
/// - `0x182f_9255_c6f8_7c28` → `0x2b15_0854_d5b5_eae7`: a removal victim still taking client
///   writes 15 s into its hand-off, its label off, is restarted on its own volume once to close
///   the connections (`ClientConnectionsCut`, `Removal::connections_cut_at`); 16 of the
///   200,000 inputs reach it. With that restart switched off the digest is the one before.
///   (A stale volume kept for the user, `Decision::kept_stale`, needs volumes with absence
///   records, which this generator never draws: `tests/stale.rs` covers it.)
/// - `0x2b15_0854_d5b5_eae7` → `0xb5b9_0e22_629d_e821`: the leaver's write rate in a hold
///   (and the restart's Event) is that of its writes since the sample before, 0 when they did
///   not move (it was the rate of the last move, however long ago: on real members a leaver
///   that took 100,000 writes 8 minutes earlier was reported writing 216 a second); the
///   restart's Event says "client input".
/// - `0xb5b9_0e22_629d_e821` → `0x0c33_4bd7_c776_0a1e`: a cluster is `Healthy` only while no
///   member's own view counts under-replicated partitions; otherwise `Reconciling`, saying so
///   (on real members a view right after the cluster formed still held a peer as Joining), and
///   looks again within a second, not at the idle pace.
/// - `0x0c33_4bd7_c776_0a1e` → `0xcbd9_745a_a4d9_afe1`: words only, no decision: a view's
///   strangers are described by the first three and a count of the rest (a member's answer
///   reaches status and Events bounded). With every stranger named the digest is the one
///   before.
/// - `0xcbd9_745a_a4d9_afe1` → `0xb315_006c_7683_e349`: a rolling change touches its member
///   only once the API server has admitted the pod that will replace it (`MemberObs::new_pod`,
///   a dry run the shell makes for `Action::CheckPod`); refused, the cluster is Blocked
///   `PodRefused` and nothing is drained, and a refusal old enough is asked again while the
///   block stands. The generator draws that answer from a stream of its own (none yet 3.6 %,
///   refused 2.4 %, half of those old enough to ask again): with every pod admitted the digest
///   is the one before.
/// - `0xb315_006c_7683_e349` → `0xe599_4b7b_9b8c_71cf`: a member whose container never
///   started, on a volume with no pod before its own (`pods_made` 1), is removed without the
///   hand-off gate: its pod deleted as never started (`DeleteUnstartedPod`), no drain, and the
///   removal complete once the pod is gone, unless in a mass failure (a pod seen again
///   while it settles is deleted again, as never started); given up if its container starts
///   first (`ScaleDownDeferred`). The generator draws such pods, and such
///   recorded removals, from a stream of their own (`never_started`): with both drawn never
///   the digest is the one before.
/// - `0xe599_4b7b_9b8c_71cf` → `0x0ec4_c607_58f0_7697`: "adopt" had three meanings; an
///   ordinal with a pod that status did not list is now *counted* (`MemberCounted`, "counted
///   demo-1 as a member: its pod exists"), where it was `MemberAdopted`, "adopted demo-1 (its
///   pod exists)". With the old reason and text the digest is the one before (checked).
/// - `0x0ec4_c607_58f0_7697` → `0x825f_c419_22a7_573c`: gate v4. A leaver whose ring may have
///   dropped writes it had not shipped (restarted after a reading with bytes unacknowledged
///   or unknown, or its ring near a cap, or unknown, while entries entered and its own were not
///   all shipped) waits for repairs to be quiet on every member, as a stalled window does.
///   With no loss ever recorded the digest is the one before (checked).
/// - `0x825f_c419_22a7_573c` → `0x4a1e_f6b3_1039_4961`: a rolling change's member still taking
///   client writes 15 s into its hand-off, its label off, is restarted at once where it keeps
///   its volume (`ClientConnectionsCut`, `Roll::connections_cut_at`): its restart is the cut.
///   14 of the 200,000 inputs reach it. With that branch switched off the digest is the one
///   before (checked).
const DIGEST: u64 = 0x4a1e_f6b3_1039_4961;

/// What the generator draws beyond `SplitMix64`'s own.
trait Draws {
    fn upto(&mut self, n: i64) -> i64;
    fn pct(&mut self, p: u64) -> bool;
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T;
}

impl Draws for SplitMix64 {
    fn upto(&mut self, n: i64) -> i64 {
        self.below(n.max(0) as u64 + 1) as i64
    }
    /// True with probability `p` (in percent).
    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// The removal and the rollout remembered, rendered the same whatever type holds them. A
/// rollout for a spec change is rendered as it was before rollouts had a reason, a removal
/// or a rollout that cut no client connections as before either could.
fn disruption(m: &Memory) -> String {
    let roll = format!("{:?}", m.roll())
        .replace("reason: SpecChanged, ", "")
        .replace(", connections_cut_at: None", "");
    let removal = format!("{:?}", m.removal()).replace(", connections_cut_at: None", "");
    format!("removal {removal} roll {roll}")
}

/// Text that renders as itself inside a `Debug` rendering.
struct Raw(String);

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The counter samples as rendered before `Sample` had split clocks and a ring figure.
fn samples(m: &Memory) -> Raw {
    let old: Vec<String> = m
        .samples
        .iter()
        .map(|(o, s)| {
            format!(
                "{o}: Sample {{ bootstraps_total: {}, repairs_total: {}, changed_at: {} }}",
                s.bootstraps_total, s.repairs_total, s.changed_at
            )
        })
        .collect();
    Raw(format!("{{{}}}", old.join(", ")))
}

/// What a decision says, without depending on the layout of `Memory`.
fn projection(d: &Decision) -> String {
    // Views by identity, only when they say something: without disagreeing views the
    // projection is the one from before they existed.
    let views = match (&d.memory.views_split_since, &d.suspected_partition) {
        (None, None) => String::new(),
        (since, p) => format!(" views {since:?} {p:?}"),
    };
    // The gate's hold report and background repair, when there is one.
    let hold = match (&d.hold, &d.background_repair) {
        (None, None) => String::new(),
        (h, bg) => format!(" hold {h:?} background {bg:?}"),
    };
    let base = format!(
        "{:?}",
        (
            &d.actions,
            &d.notes,
            d.phase,
            &d.blocked,
            &d.progress,
            d.requeue_ms,
            &d.memory.members,
            &d.memory.phases,
            samples(&d.memory),
            &d.memory.blocked,
            disruption(&d.memory),
            &d.plan,
        )
    );
    base + &views + &hold
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One generated situation: the settings that shape every round of a chain.
struct Shape {
    /// Chance (percent) that a member's pod asks for a fresh volume. Drawn, like everything
    /// about these requests, from a second generator, so that the inputs without any are the
    /// ones generated before requests existed.
    asks: u64,
    /// Chance (percent) that a member's observation is disturbed.
    chaos: u64,
    /// The pod template changed: this share (percent) of pods is outdated.
    outdated_pods: u64,
    /// Volumes of another class (with replaceVolumes): this share (percent) is outdated.
    outdated_pvcs: u64,
    /// Chance (percent) that a non-member ordinal has a pod or a volume.
    strays: u64,
    /// Chance (percent) that a ready member's view holds a stranger in place of a member (the
    /// count unchanged). Drawn from a third generator, like the remembered start of a
    /// disagreement: with both at 0 the inputs are the ones generated before views by
    /// identity existed.
    swaps: u64,
    /// Steady write load (issue 17), drawn from a fourth generator: client traffic cut on the
    /// member leaving (and now and then on another), rings occupied or unknown, gate v3's
    /// figures (rounds, input bytes, own bytes, uptime, write commands) and the samples they
    /// are read against, repairs with a rate. At 0 the inputs are the ones generated before.
    load: u64,
}

fn gen_spec(r: &mut SplitMix64) -> ClusterSpec {
    let remove_first: BTreeSet<u32> = if r.pct(25) {
        (0..1 + r.below(2)).map(|_| r.below(8) as u32).collect()
    } else {
        BTreeSet::new()
    };
    ClusterSpec {
        name: "demo".into(),
        nodes: r.below(7) as u32,
        replication_factor: 1 + r.below(3) as u32,
        remove_first,
        reclaim_pvcs: r.pct(40),
        settle_ms: r.pick(&[0, 3_000, 5_000]),
        handoff_timeout_ms: r.pick(&[20_000, 60_000]),
        paused: r.pct(15),
        // No generated volume records an absence: stale volumes are driven by the DST.
        stale_volume_grace_ms: 3_600_000,
        hibernation: false,
        fresh_volumes_on_wake: false,
        scale_up_batch: marekvs_core::SCALE_UP_BATCH,
        whole_cluster_upgrade: false,
        image_release: None,
        allow_downgrade: false,
        fenced: Default::default(),
    }
}

fn gen_time(r: &mut SplitMix64, now: Millis, spec: &ClusterSpec) -> Millis {
    match r.below(12) {
        0 | 1 => now,
        2 | 3 => now - r.upto(spec.settle_ms),
        4..=7 => now - spec.settle_ms - r.upto(10_000),
        8 | 9 => now - spec.handoff_timeout_ms - r.upto(100_000),
        // On the edges of the settle window and of the hand-off timeout.
        _ => now - r.pick(&[spec.settle_ms, spec.handoff_timeout_ms]) - r.pick(&[-1, 0, 1]),
    }
}

fn gen_memory(
    r: &mut SplitMix64,
    asks: &mut SplitMix64,
    spec: &ClusterSpec,
    now: Millis,
) -> Memory {
    let target = spec.target() as i64;
    let n = (target + r.pick(&[-2, -1, 0, 0, 0, 1, 1, 1, 2])).max(0) as u32;
    let members: BTreeSet<u32> = if r.pct(80) {
        (0..n).collect()
    } else {
        let mut s = BTreeSet::new();
        while (s.len() as u32) < n {
            s.insert(r.below(10) as u32);
        }
        s
    };
    let list: Vec<u32> = members.iter().copied().collect();
    let ordinal = |r: &mut SplitMix64| {
        if !list.is_empty() && r.pct(92) {
            r.pick(&list)
        } else {
            r.below(10) as u32
        }
    };
    let step_started_at = gen_time(r, now, spec);
    let started_at = step_started_at - r.upto(100_000);
    let (removal, roll) = match r.below(20) {
        0..=5 => (None, None),
        6..=12 => (
            Some(Removal {
                ordinal: ordinal(r),
                reason: r.pick(&[
                    VictimReason::UserChosen,
                    VictimReason::NotReady,
                    VictimReason::HighestOrdinal,
                ]),
                step: r.pick(&[
                    RemovalStep::Draining,
                    RemovalStep::HandingOff,
                    RemovalStep::Deleting,
                    RemovalStep::Settling,
                ]),
                started_at,
                step_started_at,
                connections_cut_at: None,
            }),
            None,
        ),
        _ => {
            let o = ordinal(r);
            (
                None,
                Some(Roll {
                    ordinal: o,
                    reason: if asks.pct(20) {
                        RollReason::VolumeRequested {
                            pvc: asks
                                .pick(&["pvc-gone", "pvc-x"])
                                .replace('x', &o.to_string()),
                        }
                    } else {
                        RollReason::SpecChanged
                    },
                    step: r.pick(&[
                        RollStep::Draining,
                        RollStep::HandingOff,
                        RollStep::Deleting,
                        RollStep::Rejoining,
                    ]),
                    handed_off_pvc: match r.below(3) {
                        0 => None,
                        1 => Some(format!("pvc-{o}")),
                        _ => Some("pvc-gone".into()),
                    },
                    started_at,
                    step_started_at,
                    connections_cut_at: None,
                }),
            )
        }
    };
    let mut samples = BTreeMap::new();
    let mut phases = BTreeMap::new();
    for o in 0..10u32 {
        if (members.contains(&o) && r.pct(85)) || r.pct(10) {
            let changed_at = match r.below(20) {
                0..=10 => now - spec.settle_ms - r.upto(100_000),
                11 => now - spec.settle_ms - r.pick(&[-1, 0, 1]),
                _ => now - r.upto(spec.settle_ms),
            };
            let (boots, repairs) = (r.below(2), r.below(3));
            samples.insert(o, Sample::new(boots, repairs, changed_at));
        }
        if members.contains(&o) && r.pct(60) {
            phases.insert(
                o,
                r.pick(&[
                    MemberPhase::Joining,
                    MemberPhase::Active,
                    MemberPhase::Active,
                    MemberPhase::Active,
                    MemberPhase::Unready,
                    MemberPhase::Replacing,
                    MemberPhase::Draining,
                    MemberPhase::Leaving,
                    MemberPhase::Updating,
                ]),
            );
        }
    }
    let blocked = r.pct(30).then(|| {
        r.pick(&[
            BlockReason::NotAllReady,
            BlockReason::MetricsUnavailable,
            BlockReason::Underreplicated,
            BlockReason::JoinPending,
            BlockReason::ViewsNotConverged,
            BlockReason::RepairInProgress,
            BlockReason::Replacing,
            BlockReason::HandoffTimeout,
            BlockReason::Paused,
        ])
    });
    Memory {
        members,
        disruption: removal
            .map(Disruption::Removal)
            .or(roll.map(Disruption::Roll)),
        samples,
        phases,
        blocked,
        views_split_since: None,
        hibernated: false,
        hold_since: None,
    }
}

fn healthy(o: u32, view: u64, seen: &BTreeSet<u32>, sample: Option<&Sample>) -> MemberObs {
    MemberObs {
        view: Some(View::of_ordinals(o, seen.iter().copied())),
        pod: Some(PodObs {
            ready: true,
            ..PodObs::default()
        }),
        pvc: Some(PvcObs {
            uid: format!("pvc-{o}"),
            ..PvcObs::default()
        }),
        scrape: Some(Scrape {
            view_members: view,
            bootstraps_total: sample.map_or(0, |s| s.bootstraps_total),
            repairs_total: sample.map_or(0, |s| s.repairs_total),
            ..Scrape::default()
        }),
        look_alike: false,
        password: Default::default(),
        client_input: Some(0),
        new_pod: PodAdmission::Admitted,
    }
}

const UNSTARTED_PCT: u64 = 30;
const UNSTARTED_REMOVAL_PCT: u64 = 15;

/// Some pods not ready never started, on volumes whose pod count is 1 (most), 2 or unknown:
/// drawn from a stream of their own, after everything else.
fn never_started(r: &mut SplitMix64, observed: &mut BTreeMap<u32, MemberObs>) {
    for m in observed.values_mut() {
        if let Some(p) = m.pod.as_mut().filter(|p| !p.ready && !p.terminating)
            && r.pct(UNSTARTED_PCT)
        {
            p.never_started = true;
            if let Some(v) = m.pvc.as_mut() {
                v.pods_made = r.pick(&[Some(1), Some(1), Some(2), None]);
            }
        }
    }
}

/// Shape the member being removed or restarted as its step expects, most of the time.
fn disrupted(r: &mut SplitMix64, m: &mut MemberObs, memory: &Memory) {
    let pod = m.pod.get_or_insert_with(PodObs::default);
    if let Some(rm) = memory.removal() {
        match rm.step {
            RemovalStep::Draining => pod.drained = r.pct(40),
            RemovalStep::HandingOff => {
                pod.drained = r.pct(80);
                pod.terminating = r.pct(10);
            }
            RemovalStep::Deleting => {
                pod.drained = r.pct(75);
                pod.terminating = r.pct(40);
                if r.pct(35) {
                    m.pod = None;
                }
            }
            RemovalStep::Settling => {
                if r.pct(80) {
                    m.pod = None;
                }
            }
        }
    } else if let Some(rl) = memory.roll() {
        pod.outdated = r.pct(75);
        match rl.step {
            RollStep::Draining => pod.drained = r.pct(40),
            RollStep::HandingOff => {
                pod.drained = r.pct(80);
                pod.terminating = r.pct(10);
            }
            RollStep::Deleting => {
                pod.drained = r.pct(50);
                pod.terminating = r.pct(30);
                if r.pct(15) {
                    m.pod = None;
                }
            }
            RollStep::Rejoining => {
                pod.outdated = r.pct(25);
                pod.ready = r.pct(70);
                pod.terminating = r.pct(10);
                if r.pct(45) {
                    m.pod = None;
                }
            }
        }
        if let Some(v) = m.pvc.as_mut() {
            v.outdated = r.pct(40);
            v.terminating = r.pct(15);
            if r.pct(30) {
                v.uid = "pvc-gone".into();
            }
        }
    }
    if m.pod.is_none() {
        m.scrape = None;
    }
}

fn disturb(r: &mut SplitMix64, m: &mut MemberObs) {
    match r.below(14) {
        0 | 1 => {
            m.pod = None;
            m.scrape = None;
        }
        2 => {
            if let Some(p) = m.pod.as_mut() {
                p.ready = false;
            }
        }
        3 => {
            if let Some(p) = m.pod.as_mut() {
                p.terminating = true;
            }
        }
        4 => {
            if let Some(p) = m.pod.as_mut() {
                p.drained = true;
            }
        }
        5 => m.pvc = None,
        6 => {
            if let Some(v) = m.pvc.as_mut() {
                v.terminating = true;
            }
        }
        7 => m.scrape = None,
        8 => {
            if let Some(s) = m.scrape.as_mut() {
                s.underreplicated = 1 + r.below(8);
            }
        }
        9 => {
            if let Some(s) = m.scrape.as_mut() {
                s.join_pending = 1 + r.below(3);
            }
        }
        10 => {
            if let Some(s) = m.scrape.as_mut() {
                s.view_members = r.below(8);
            }
        }
        11 => {
            if let Some(s) = m.scrape.as_mut() {
                s.repairs_total += 1;
            }
        }
        12 => {
            m.pod = None;
            m.pvc = None;
            m.scrape = None;
        }
        _ => {
            if let Some(v) = m.pvc.as_mut() {
                v.outdated = true;
            }
        }
    }
}

/// A ready member's view, drawn by `views`, holds a stranger in place of another member.
fn swap_a_view(views: &mut SplitMix64, out: &mut BTreeMap<u32, MemberObs>) {
    let ready: Vec<u32> = out
        .iter()
        .filter(|(_, m)| m.view.is_some() && m.pod.as_ref().is_some_and(|p| p.ready))
        .map(|(o, _)| *o)
        .collect();
    if ready.is_empty() {
        return;
    }
    let o = views.pick(&ready);
    let v = out
        .get_mut(&o)
        .and_then(|m| m.view.as_mut())
        .expect("ready with a view");
    if let Some(other) = v.peers.keys().find(|id| **id != v.id).cloned() {
        v.peers.remove(&other);
        v.peers.insert(View::ordinal_id(77), String::new());
    }
}

/// The figures of one member under load (`sample`: what the operator remembers of it): its
/// ring and client-traffic label, and gate v3's figures, most of the time consistent with the
/// sample (its rounds moved on, no input but the operator's own view read), at times showing
/// client input, a restart, or an unknown figure.
fn loaded(loads: &mut SplitMix64, m: &mut MemberObs, leaving: bool, sample: Option<&Sample>) {
    if let Some(p) = m.pod.as_mut() {
        p.client_traffic_off = loads.pct(if leaving { 85 } else { 3 });
    }
    let client = loads.pct(15);
    if let Some(s) = m.scrape.as_mut() {
        s.ring_ops = match loads.below(10) {
            0..=5 => Some(0),
            6..=8 => Some(1 + loads.below(500)),
            _ => None,
        };
        let (rounds, writes) = sample.map_or((loads.below(40), 0), |x| {
            (x.ae_rounds.unwrap_or(0), x.writes_total)
        });
        s.ae_rounds = match loads.below(20) {
            0 => None,
            // Restarted: its counter back near 0.
            1 => Some(loads.below(3)),
            _ => Some(rounds + loads.below(5)),
        };
        s.client_input_bytes = Some(loads.below(5_000));
        s.write_commands = writes + if client { loads.below(100) } else { 0 };
        s.uptime_ms = match loads.below(20) {
            0 => None,
            1 => Some(loads.below(3_000)),
            _ => Some(3_600_000 + loads.below(3_600_000)),
        };
    }
    // What the shell's ledger hands over: unknown (no earlier reading, a read cut off), a
    // client's bytes, or none.
    m.client_input = match loads.below(25) {
        0 => None,
        _ if client => Some(1 + loads.below(500)),
        _ => Some(0),
    };
}

/// Remembered samples under load: repairs with a rate, bootstraps quiet, and gate v3's
/// figures: rounds and input last read, since when the member is quiet and at which round.
fn loaded_samples(loads: &mut SplitMix64, memory: &mut Memory, settle_ms: Millis, now: Millis) {
    for x in memory.samples.values_mut() {
        x.repairs_prev = Some((0, x.repairs_changed_at - 1_000));
        if loads.pct(30) {
            // Repairs moving while bootstraps are quiet.
            x.bootstraps_changed_at = now - settle_ms - loads.upto(10_000);
        }
        let rounds = loads.below(60);
        x.sampled_at = now - loads.pick(&[1_000, 2_000, 5_000]);
        x.ae_rounds = loads.pct(95).then_some(rounds);
        x.view_digest = loads.pct(20).then(|| loads.next_u64());
        x.writes_total = loads.below(1_000);
        x.writes_prev = loads.pct(50).then(|| {
            (
                x.writes_total.saturating_sub(loads.below(400)),
                x.sampled_at - 2_000,
            )
        });
        x.quiet_since = x.sampled_at - loads.upto(60_000);
        x.quiet_reset = loads.pick(&[
            QuietReset::FirstSeen,
            QuietReset::ClientInput,
            QuietReset::Restarted,
            QuietReset::ViewChanged,
            QuietReset::Unknown,
        ]);
        x.rounds_at_quiet = loads
            .pct(90)
            .then(|| rounds.saturating_sub(loads.below(15)));
    }
}

fn gen_observed(
    r: &mut SplitMix64,
    asks: &mut SplitMix64,
    loads: &mut SplitMix64,
    admits: &mut SplitMix64,
    shape: &Shape,
    memory: &Memory,
    spec: &ClusterSpec,
) -> BTreeMap<u32, MemberObs> {
    let mut strays: BTreeMap<u32, (bool, bool, bool)> = BTreeMap::new();
    for o in 0..10u32 {
        if !memory.members.contains(&o) && r.pct(shape.strays) {
            strays.insert(o, (r.pct(40), r.pct(85), r.pct(25)));
        }
    }
    let adopted = strays.values().filter(|(pod, _, _)| *pod).count() as u64;
    let n = memory.members.len() as u64 + adopted;
    let settling = memory
        .removal()
        .is_some_and(|rm| rm.step >= RemovalStep::Deleting);
    let view = match r.below(20) {
        0..=12 if !settling => n,
        0..=12 => n.saturating_sub(1),
        13..=16 => n,
        17 | 18 => n.saturating_sub(1),
        _ => n + 1,
    };
    // The same view by identity: the members and adopted strays, less one (the member
    // leaving, or the highest) or plus a stranger, as the count says.
    let mut seen: BTreeSet<u32> = memory.members.clone();
    seen.extend(strays.iter().filter(|(_, s)| s.0).map(|(o, _)| *o));
    let leaving = memory.removal().map(|rm| rm.ordinal);
    if view < n {
        let gone = leaving
            .filter(|_| settling)
            .or(seen.last().copied())
            .unwrap_or(0);
        seen.remove(&gone);
    } else if view > n {
        seen.insert(99);
    }
    let target = memory.disruption.as_ref().and_then(Disruption::ordinal);
    let mut out = BTreeMap::new();
    for &o in &memory.members {
        let mut m = healthy(o, view, &seen, memory.samples.get(&o));
        if let Some(p) = m.pod.as_mut() {
            p.outdated = r.pct(shape.outdated_pods);
            p.replace_volume = shape.asks > 0 && asks.pct(shape.asks);
            // The API server's last word on its new pod: none yet, or a refusal.
            if admits.pct(6) {
                m.new_pod = if admits.pct(40) {
                    PodAdmission::Refused {
                        message: "serviceaccount \"nope\" not found".into(),
                        ask_again: admits.pct(50),
                    }
                } else {
                    PodAdmission::Unchecked
                };
            }
        }
        if let Some(v) = m.pvc.as_mut() {
            v.outdated = r.pct(shape.outdated_pvcs);
        }
        if Some(o) == target {
            disrupted(r, &mut m, memory);
        }
        if shape.load > 0 {
            loaded(loads, &mut m, Some(o) == target, memory.samples.get(&o));
        }
        if r.pct(shape.chaos) {
            disturb(r, &mut m);
        }
        if spec.settle_ms > 0 && r.pct(3) {
            // Counters this member never reported before.
            if let Some(s) = m.scrape.as_mut() {
                s.bootstraps_total += 7;
            }
        }
        if m.scrape.is_none() {
            m.view = None;
        }
        out.insert(o, m);
    }
    for (o, (pod, pvc, terminating)) in strays {
        let mut m = healthy(o, view, &seen, memory.samples.get(&o));
        if !pod {
            m.pod = None;
            m.scrape = None;
        }
        if !pvc {
            m.pvc = None;
        } else if let Some(v) = m.pvc.as_mut() {
            v.terminating = terminating;
        }
        if m.pod.is_none() && m.pvc.is_none() {
            continue;
        }
        if m.scrape.is_none() {
            m.view = None;
        }
        out.insert(o, m);
    }
    out
}

fn norm(s: &str) -> String {
    let mut out = String::new();
    let mut digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('#');
            }
            digits = true;
        } else {
            out.push(c);
            digits = false;
        }
    }
    out
}

/// The branches a decision shows, each as `context :: what`, the context being the removal or
/// rollout step it started from.
fn branches(input: &Memory, observed: &BTreeMap<u32, MemberObs>, d: &Decision) -> Vec<String> {
    let ctx = match (input.removal(), input.roll()) {
        (Some(r), _) if !input.members.contains(&r.ordinal) => "stale removal".to_string(),
        (_, Some(r)) if !input.members.contains(&r.ordinal) => "stale roll".to_string(),
        (Some(r), _) => format!("removal {:?}", r.step),
        (_, Some(r)) => format!("roll {:?}", r.step),
        _ => "idle".to_string(),
    };
    let mut out: Vec<String> = Vec::new();
    let mut add = |what: String| out.push(what.clone());
    for a in &d.actions {
        let kind = match a {
            Action::SetClientTraffic { on, .. } => {
                format!("SetClientTraffic {}", if *on { "on" } else { "off" })
            }
            _ => format!("{a:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .into(),
        };
        add(format!("action {kind}"));
        add(format!("{ctx} :: action {kind}"));
    }
    for (k, p) in d.plan.iter().enumerate() {
        let step = if k == 0 { "first" } else { "later" };
        let held = match &p.held_by {
            None => "not held".to_string(),
            Some(Hold::Gate(b)) => format!("Gate {:?}", b.reason),
            Some(Hold::Floor { .. }) => "Floor".to_string(),
            Some(Hold::Paused) => "Paused".to_string(),
            Some(Hold::InProgress { message }) => {
                format!(
                    "InProgress {}",
                    message.split(' ').nth(1).unwrap_or_default()
                )
            }
        };
        add(format!("plan {step} {:?} {held}", p.reason));
        add(format!("plan {step} {held}"));
    }
    if let Some(r) = d.memory.removal() {
        add(format!("removal step {:?}", r.step));
        add(format!("{ctx} -> removal {:?}", r.step));
    }
    if let Some(r) = d.memory.roll() {
        add(format!("roll step {:?}", r.step));
        add(format!("{ctx} -> roll {:?}", r.step));
        if let Some(i) = input.roll()
            && i.handed_off_pvc.is_some()
            && r.handed_off_pvc.is_none()
        {
            add(format!("{ctx} :: hand-off forgotten"));
        }
        if r.handed_off_pvc.is_some() && input.roll().is_none_or(|i| i.step != r.step) {
            add(format!("{ctx} :: hand-off recorded"));
        }
        if r.requested() {
            add(format!("{ctx} -> fresh volume {:?}", r.step));
            if d.actions.contains(&Action::DeletePvc(r.ordinal)) {
                add(format!("{ctx} :: fresh volume: old one deleted"));
            }
        }
    }
    if let Some(b) = &d.blocked {
        add(format!("blocked {:?}", b.reason));
        add(format!("{ctx} :: blocked {:?}", b.reason));
        let m = norm(&b.message);
        if let Some(held) = m.strip_prefix("spec.paused is set: holding ") {
            if held.starts_with("the scale-down") || held.starts_with("the rolling update") {
                add(format!(
                    "{ctx} :: paused {}",
                    held.split(" from").next().unwrap_or_default()
                ));
            } else {
                for h in held.split("; ") {
                    add(format!("{ctx} :: held {h}"));
                }
            }
        } else if b.reason == BlockReason::HandoffTimeout {
            add(format!(
                "{ctx} :: timeout {}",
                m.split(" has not settled").next().unwrap_or_default()
            ));
        } else if b.reason == BlockReason::Replacing {
            add(format!("{ctx} :: blocked {m}"));
        }
    }
    for n in &d.notes {
        let m = norm(&n.message);
        let m = match n.reason.as_str() {
            "ScaleDownBlocked" | "UpdateBlocked" | "Paused" => {
                m.split(':').next().unwrap_or_default().to_string()
            }
            _ => m,
        };
        add(format!("note {}", n.reason));
        add(format!("{ctx} :: note {} {m}", n.reason));
    }
    if let Some(p) = &d.progress {
        for item in p.split("; ") {
            let item = norm(item);
            let item = if ["handing off", "settling after", "updating "]
                .iter()
                .any(|x| item.starts_with(x))
            {
                item.split(':').next().unwrap_or_default().to_string()
            } else {
                item
            };
            add(format!("{ctx} :: progress {item}"));
        }
    }
    if d.suspected_partition.is_some() {
        add("suspected partition".into());
    }
    if let Some(h) = &d.hold {
        add(format!("hold {:?} {:?}", h.reason, h.moving));
        add(format!("{ctx} :: hold {:?} {:?}", h.reason, h.moving));
        if h.stuck {
            add("hold stuck".into());
        }
        // Gate v3 on the leaver: why it holds.
        for (what, says) in [
            ("client input", "still receives client commands"),
            ("rounds", "anti-entropy rounds that hand on"),
            ("unknown", "are unknown"),
            ("not labelled off", "waiting for its pod to be labelled"),
        ] {
            if h.message.contains(says) {
                add(format!("leaver {what}"));
                add(format!("{ctx} :: leaver {what}"));
            }
        }
    }
    // Samples that went quiet again in this pass, by why.
    for (o, x) in &d.memory.samples {
        let before = input.samples.get(o);
        if before.is_some_and(|b| b.quiet_since != x.quiet_since || b.quiet_reset != x.quiet_reset)
        {
            add(format!("quiet reset {:?}", x.quiet_reset));
        }
    }
    if d.background_repair.is_some() {
        add("background repair".into());
    }
    let progress = d.progress.as_deref().unwrap_or_default();
    if progress.contains("views disagree") && progress.contains(": holding ") {
        add(format!("{ctx} :: views held"));
    }
    if d.blocked
        .as_ref()
        .is_some_and(|b| b.message.contains("by identity"))
    {
        add("blocked by identity".into());
    }
    if d.blocked
        .as_ref()
        .is_some_and(|b| b.message.starts_with("views not read over RESP"))
    {
        add("blocked view not read".into());
    }
    add(format!("phase {:?}", d.phase));
    for p in d.memory.phases.values() {
        add(format!("member phase {p:?}"));
    }
    add(format!("requeue {}", d.requeue_ms));
    if d.requeue_ms == stepper::REQUEUE_IDLE_MS && d.phase != ClusterPhase::Healthy {
        add("requeue idle while waiting on pods".into());
    }
    if observed.len() > d.memory.members.len() {
        add("strays observed".into());
    }
    out.sort();
    out.dedup();
    out
}

/// Every branch of `decide` the generator must reach.
const REACHED: &[&str] = &[
    "idle :: note ScaleDownStarted removing demo-# (its container never started: it holds no data, so no drain and no hand-off gate): # → # members",
    "removal Settling :: note MemberRemoved demo-# removed; its container never started, so it held no data; its volume is kept",
    "action DeleteUnstartedPod",
    "removal Deleting :: note ScaleDownDeferred demo-# started before its pod was deleted: it may hold data now, so it is removed only behind the hand-off gate, like any other member",
    "plan first NeverStarted not held",
    "action CheckPod",
    "blocked PodRefused",
    "note ClientConnectionsCut",
    "action CreatePvc",
    "action CreatePod",
    "action Drain",
    "action DeletePod",
    "action DeletePvc",
    "removal step Draining",
    "removal step HandingOff",
    "removal step Deleting",
    "removal step Settling",
    "roll step Draining",
    "roll step HandingOff",
    "roll step Deleting",
    "roll step Rejoining",
    "blocked NotAllReady",
    "blocked MetricsUnavailable",
    "blocked Underreplicated",
    "blocked JoinPending",
    "blocked ViewsNotConverged",
    "blocked RepairInProgress",
    "blocked Replacing",
    "blocked HandoffTimeout",
    "blocked Paused",
    "phase Reconciling",
    "phase Healthy",
    "phase ScalingUp",
    "phase ScalingDown",
    "phase Replacing",
    "phase Updating",
    "phase Paused",
    "phase Blocked",
    "member phase Joining",
    "member phase Active",
    "member phase Unready",
    "member phase Replacing",
    "member phase Draining",
    "member phase Leaving",
    "member phase Updating",
    // The plan (status.plan).
    "plan first UserChosen not held",
    "plan first NotReady not held",
    "plan first HighestOrdinal not held",
    "plan later UserChosen InProgress removal",
    "plan later NotReady InProgress removal",
    "plan later HighestOrdinal InProgress removal",
    "plan first not held",
    "plan first Gate NotAllReady",
    "plan first Gate MetricsUnavailable",
    "plan first Gate Underreplicated",
    "plan first Gate JoinPending",
    "plan first Gate ViewsNotConverged",
    "plan first Gate RepairInProgress",
    "plan first Gate Replacing",
    "plan first Gate HandoffTimeout",
    "plan first Paused",
    "plan later Paused",
    "plan first InProgress restart",
    "plan first InProgress drained",
    "plan later InProgress removal",
    "plan later Floor",
    "requeue 250",
    "requeue 1000",
    "requeue 10000",
    "requeue idle while waiting on pods",
    // Members with pods counted, stale records, cancel, scale up.
    "idle :: note MemberCounted counted demo-# as a member: its pod exists",
    "stale removal -> removal Draining",
    "stale roll -> roll Draining",
    "removal Draining :: note RemovalCancelled spec.nodes grew back to #: demo-# stays; if it was drained it restarts on its own volume",
    "idle :: note MemberCreated creating demo-#",
    "idle :: note MemberCreated creating demo-# on its existing volume",
    // Children.
    "idle :: action CreatePvc",
    "idle :: note MemberReplaced demo-# has no pod: re-creating it on its own volume",
    "idle :: note MemberReplaced demo-# has no pod: re-creating it on a fresh volume (it rejoins empty)",
    "idle :: progress waiting for the old volume of demo-# to be deleted",
    "roll Rejoining :: action CreatePvc",
    // Recycle.
    "idle :: action DeletePod",
    "idle :: progress restarting demo-#: it was drained for a removal that was cancelled",
    "idle :: held restarting the drained demo-#",
    // Removal: draining.
    "removal Draining :: note LostBeforeHandOff demo-# lost its pod before its data was handed off: re-creating it on its volume and draining it again",
    "removal Draining :: note Draining demo-# drained: handing its data off",
    "removal Draining :: held draining demo-#",
    "removal Draining :: action Drain",
    "removal Draining :: progress draining demo-#",
    // Removal: handing off.
    "removal HandingOff :: note LostBeforeHandOff demo-# lost its pod before its data was handed off: re-creating it on its volume and draining it again",
    "removal HandingOff :: note RestartedWhileDraining demo-# restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off",
    "removal HandingOff :: held deleting the pod of demo-#",
    "removal HandingOff :: action DeletePod",
    "removal HandingOff -> removal Deleting",
    "removal HandingOff :: progress handing off demo-#",
    "removal HandingOff :: timeout removing demo-#: hand-off before deleting its pod",
    // Removal: deleting.
    "removal Deleting -> removal Settling",
    "removal Deleting :: note RestartedWhileDraining demo-# restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off",
    "removal Deleting :: progress waiting for demo-# to flush and exit",
    "removal Deleting :: held deleting the pod of demo-#",
    "removal Deleting :: action DeletePod",
    // Removal: settling.
    "removal Settling :: note MemberRemoved demo-# removed; every remaining view converged and re-replication settled; deleting its volume",
    "removal Settling :: note MemberRemoved demo-# removed; every remaining view converged and re-replication settled; its volume is kept",
    "removal Settling :: action DeletePvc",
    "removal Settling :: progress settling after demo-# left",
    "removal Settling :: timeout removing demo-#: hand-off after its pod was deleted",
    // Rollout.
    "roll Draining :: note MemberRestarting re-creating demo-# with the current spec on its own volume",
    "roll HandingOff :: note MemberRestarting re-creating demo-# with the current spec on its own volume",
    "roll Deleting :: note MemberRestarting re-creating demo-# with the current spec on its own volume",
    "roll Rejoining :: hand-off forgotten",
    "roll Draining :: note UpdateCancelled demo-# already runs the current spec; not restarting it",
    "roll Draining :: note Draining demo-# drained before its restart: handing its data off",
    "roll Draining :: held draining demo-# for the update",
    "roll Draining :: action Drain",
    "roll Draining :: progress draining demo-# before restarting it with the current spec",
    "roll HandingOff :: note RestartedWhileDraining demo-# restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off",
    "roll HandingOff :: held restarting demo-#",
    "roll HandingOff :: action DeletePod",
    "roll HandingOff :: hand-off recorded",
    "roll HandingOff :: progress updating demo-#",
    "roll HandingOff :: timeout updating demo-#: hand-off before its restart",
    "roll Deleting :: progress waiting for demo-# to flush and exit",
    "roll Deleting :: held restarting demo-#",
    "roll Deleting :: action DeletePod",
    "roll Deleting :: note RestartedWhileDraining demo-# restarted after its drain and may own data again: draining it again, then waiting for a fresh hand-off",
    "roll Deleting -> roll Rejoining",
    "roll Rejoining :: held replacing the volume of demo-#",
    "roll Rejoining :: action DeletePvc",
    "roll Rejoining :: progress replacing the volume of demo-#",
    "roll Rejoining :: action CreatePod",
    "roll Rejoining :: progress demo-# lost its pod before its data was handed off: restarting it on its old volume",
    "roll Rejoining :: progress waiting for the old volume of demo-# to go",
    "roll Rejoining :: progress re-creating demo-# with the current spec",
    "roll Rejoining :: progress waiting for the old pod of demo-# to go",
    "roll Rejoining :: held restarting demo-# again",
    "roll Rejoining :: action DeletePod",
    "roll Rejoining :: note MemberUpdated demo-# runs the current spec; the cluster is fully replicated again",
    "roll Rejoining :: progress updating demo-#",
    "roll Rejoining :: timeout updating demo-#: rejoin after its restart",
    // Start a removal.
    "idle :: paused the scale-down",
    "idle :: blocked members are being (re-)created",
    "idle :: blocked a member is being replaced; waiting until it is Active and the cluster fully replicated",
    "idle :: blocked NotAllReady",
    "idle :: note ScaleDownStarted removing demo-# (listed in spec.removeMembers): # → # members",
    "idle :: note ScaleDownStarted removing demo-# (highest ordinal): # → # members",
    // A fresh volume asked for.
    "idle -> fresh volume Draining",
    "roll Draining -> fresh volume HandingOff",
    "roll HandingOff -> fresh volume Deleting",
    "roll Deleting -> fresh volume Rejoining",
    "roll Rejoining :: fresh volume: old one deleted",
    "roll Rejoining -> fresh volume Draining",
    "idle :: note VolumeReplacementStarted moving demo-# to a fresh volume, as its pod asks: draining it, then replacing its volume once the others hold its data",
    "roll Rejoining :: note VolumeReplaced demo-# runs on a fresh volume; the cluster is fully replicated again",
    "roll Rejoining :: note RestartedOnOldVolume demo-# came back on the volume it was asked to leave (its pod went before its data was handed off): draining it again",
    "roll Deleting :: note MemberRestarting re-creating demo-# on a fresh volume once its data was handed off",
    "idle :: held the fresh volume asked for demo-#",
    "idle :: held the fresh volume asked for demo-# and the rolling update of # outdated members",
    // Start a rollout.
    "idle :: paused the rolling update of # outdated members",
    "idle :: blocked a member is being (re-)created; waiting until it is Active and the cluster fully replicated",
    "idle :: note UpdateStarted restarting demo-# with the current spec (# of # members outdated)",
    // Reclaim.
    "idle :: action DeletePvc",
    // Report.
    "idle :: note ScaleDownBlocked NotAllReady",
    "idle :: note UpdateBlocked Replacing",
    "idle :: note Paused Paused",
    "removal HandingOff :: note ScaleDownBlocked HandoffTimeout",
    "roll HandingOff :: note UpdateBlocked HandoffTimeout",
    "idle :: note Unblocked the held step may proceed",
    "idle :: progress new members are joining",
    "idle :: progress a member is being replaced",
    "idle :: progress waiting for members to become ready",
    // Views by identity.
    "suspected partition",
    "blocked by identity",
    "blocked view not read",
    "idle :: views held",
    "removal HandingOff :: views held",
    "removal Deleting :: views held",
    "roll Rejoining :: views held",
    // Gate v2 under load (issue 17).
    "action SetClientTraffic off",
    "action SetClientTraffic on",
    "idle :: action SetClientTraffic off",
    "removal HandingOff :: action SetClientTraffic off",
    "roll HandingOff :: action SetClientTraffic off",
    "blocked LeaverBacklog",
    "plan first Gate LeaverBacklog",
    "hold LeaverBacklog ClientTraffic",
    "hold RepairInProgress Bootstraps",
    "hold RepairInProgress Other",
    "hold stuck",
    "background repair",
    "note HandoffHeld",
    "note HandoffStuck",
    // Gate v3 (the leaver's own anti-entropy since it went quiet).
    "hold LeaverBacklog AntiEntropy",
    "idle :: hold LeaverBacklog AntiEntropy",
    "leaver client input",
    "leaver rounds",
    "leaver unknown",
    "leaver not labelled off",
    "removal HandingOff :: leaver client input",
    "removal HandingOff :: leaver rounds",
    "removal Deleting :: progress demo-# is no longer known to be handed on (client input, a restart or an unknown reading since): handing off again",
    "roll Deleting :: progress demo-# is no longer known to be handed on (client input, a restart or an unknown reading since): handing off again",
    "quiet reset ClientInput",
    "quiet reset Restarted",
    "quiet reset ViewChanged",
    "quiet reset Unknown",
    "blocked SingleCopy",
    "idle :: blocked SingleCopy",
];

#[test]
fn decide_over_generated_inputs_has_the_recorded_digest() {
    let mut r = SplitMix64(0x6d61_7265_6b76_7321);
    let mut asks = SplitMix64(0x6672_6573_6876_6f6c);
    let mut views = SplitMix64(0x7669_6577_7369_6421);
    let mut loads = SplitMix64(0x6c6f_6164_7269_6e67);
    // Its own stream, so the inputs drawn before it came are drawn the same.
    let mut admits = SplitMix64(0x6164_6d69_7473_2121);
    let mut unstarted = SplitMix64(0x756e_7374_6172_7421);
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut inputs = 0usize;
    while inputs < INPUTS {
        let mut spec = gen_spec(&mut r);
        let shape = Shape {
            asks: if asks.pct(15) {
                asks.pick(&[10, 40])
            } else {
                0
            },
            chaos: r.pick(&[0, 0, 0, 5, 15, 40, 80]),
            outdated_pods: if r.pct(30) { r.pick(&[20, 60, 100]) } else { 0 },
            outdated_pvcs: if r.pct(10) { r.pick(&[30, 100]) } else { 0 },
            strays: r.pick(&[0, 0, 5, 20]),
            swaps: if views.pct(20) {
                views.pick(&[30, 80])
            } else {
                0
            },
            load: if loads.pct(LOAD_PCT) { 1 } else { 0 },
        };
        let mut now: Millis = if r.pct(1) {
            -r.upto(5_000)
        } else {
            1_700_000_000_000 + r.upto(1_000_000_000)
        };
        let mut memory = gen_memory(&mut r, &mut asks, &spec, now.max(0));
        // A removal recorded as of a member whose container never started.
        if let Some(Disruption::Removal(rm)) = memory.disruption.as_mut()
            && unstarted.pct(UNSTARTED_REMOVAL_PCT)
        {
            rm.reason = VictimReason::NeverStarted;
        }
        if shape.load > 0 {
            loaded_samples(&mut loads, &mut memory, spec.settle_ms, now.max(0));
        }
        if shape.swaps > 0 && views.pct(50) {
            // Views disagreed before this chain: for a while, or past the bound.
            memory.views_split_since = Some(now.max(0) - views.upto(60_000));
        }
        for _ in 0..1 + r.below(4) {
            if inputs == INPUTS {
                break;
            }
            let mut observed = gen_observed(
                &mut r,
                &mut asks,
                &mut loads,
                &mut admits,
                &shape,
                &memory,
                &spec,
            );
            never_started(&mut unstarted, &mut observed);
            if shape.swaps > 0 && views.pct(shape.swaps) {
                swap_a_view(&mut views, &mut observed);
            }
            if shape.swaps > 0 && views.pct(10) {
                // A view not read over RESP, the member's metrics read.
                let o = views.below(8) as u32;
                if let Some(m) = observed.get_mut(&o) {
                    m.view = None;
                }
            }
            let d = decide(&Input {
                spec: &spec,
                memory: &memory,
                observed: &observed,
                now,
            });
            digest = fnv(digest, projection(&d).as_bytes());
            digest = fnv(digest, b"\n");
            for b in branches(&memory, &observed, &d) {
                *counts.entry(b).or_default() += 1;
            }
            inputs += 1;
            memory = d.memory;
            now += r.upto(spec.settle_ms * 2);
            if r.pct(10) {
                spec.paused = !spec.paused;
            }
            if r.pct(10) {
                spec.nodes = r.below(7) as u32;
            }
        }
    }
    for (b, n) in &counts {
        println!("{n:>7}  {b}");
    }
    let missing: Vec<&&str> = REACHED
        .iter()
        .filter(|b| counts.get(**b).copied().unwrap_or(0) == 0)
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:#?}");
    println!("{inputs} inputs, digest {digest:#018x}");
    assert_eq!(digest, DIGEST, "decide over {inputs} inputs changed");
}
