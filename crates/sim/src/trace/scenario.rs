//! The scenarios, written once against [`Backend`] through a [`Recorder`].
//!
//! Keys are `key:<i>`; "through member m" means over member m's RESP port. Each scenario is
//! bounded by its plan's deadline.

use anyhow::bail;

use super::backend::Backend;
use super::recorder::Recorder;

/// The scenarios by name.
pub const SCENARIOS: [&str; 6] = [
    "writes",
    "drain",
    "gap",
    "restart",
    "idle-start",
    "handoff-load",
];

/// What a scenario needs from its backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub members: usize,
    pub replicas_n: u32,
    /// The whole scenario must end within this (scenario time).
    pub deadline_ms: u64,
}

pub fn plan(name: &str) -> Option<Plan> {
    let (members, replicas_n, deadline_s) = match name {
        "writes" => (2, 2, 180),
        "drain" => (3, 2, 240),
        "gap" => (3, 2, 420),
        "restart" => (3, 2, 180),
        "idle-start" => (3, 2, 60),
        "handoff-load" => (4, 2, 480),
        _ => return None,
    };
    Some(Plan {
        members,
        replicas_n,
        deadline_ms: deadline_s * 1000,
    })
}

/// How long to wait for members to come up and see each other.
const SETTLE_MS: u64 = 60_000;

/// What scenario `name` does, in a sentence (also the trace's first note).
pub fn describe(name: &str) -> Option<&'static str> {
    Some(match name {
        "writes" => {
            "2 members, RF 2: 2,000 SETs of 16 B through member 0; 60 s more; all keys read \
             through member 1 right after the writes and every 5 s"
        }
        "drain" => {
            "3 members, RF 2: 5,000 SETs of 16 B through member 2; 3 s; /drain member 2; 25 s; \
             SIGTERM member 2; until it exits and 30 s more; all keys read through member 0 \
             every 3 s for 30 s"
        }
        "gap" => {
            "3 members, RF 2: 180,000 SETs of 1 KiB through member 0, pipelined 1,000 at a time \
             (more than the 128 MiB ring holds); every 10th key read through member 1 right \
             after and every 10 s, until the repair counters stand still for 21 s or 180 s \
             after the writes"
        }
        "restart" => {
            "3 members, RF 2: 3,000 SETs of 16 B through member 1; 10 s; SIGTERM member 1; 5 s \
             after its exit, start it again on its data; 40 s, all keys read through it every \
             5 s once it answers RESP"
        }
        "idle-start" => "3 members, RF 2, start together: their first 15 s",
        "handoff-load" => {
            "4 members, RF 2. A hand-off under a steady load: 200 SETs of 1 KiB through member 0 \
             every 100 ms; 10 s on, /drain member 3; 20 s; SIGTERM member 3, the load going on \
             until it exits and 10 s more; every 10th key read through member 1 then and every \
             5 s until none is missing, at most 60 s. Then a restart with unshipped writes: \
             40,000 SETs of 4 KiB through member 2, pipelined 1,000 at a time (more than its \
             128 MiB ring), SIGTERM at once, started again on its data 5 s after its exit; all \
             of them read through it once RESP answers, and every 10th through member 1 every \
             10 s until none is missing, at most 120 s"
        }
        _ => return None,
    })
}

pub async fn run<B: Backend>(rec: &mut Recorder<B>, name: &str) -> anyhow::Result<()> {
    if let Some(text) = describe(name) {
        rec.note(format!("scenario {name}: {text}"));
    }
    match name {
        "writes" => writes(rec).await,
        "drain" => drain(rec).await,
        "gap" => gap(rec).await,
        "restart" => restart(rec).await,
        "idle-start" => idle_start(rec).await,
        "handoff-load" => handoff_load(rec).await,
        other => bail!("no scenario {other:?} (known: {})", SCENARIOS.join(", ")),
    }
}

/// Keep sampling until `until` (scenario time), reading the `count` keys from `first` by
/// `step` through `m` every `every_ms`.
async fn reads_until<B: Backend>(
    rec: &mut Recorder<B>,
    until: u64,
    every_ms: u64,
    m: usize,
    (first, step, count): (u32, u32, u32),
) -> anyhow::Result<()> {
    while rec.now() < until {
        rec.wait(every_ms.min(until - rec.now())).await?;
        if rec.now() < until {
            rec.check_reads(m, first, step, count).await?;
        }
    }
    Ok(())
}

/// 2 members, RF 2: 2,000 small SETs through member 0, then 60 s of sampling, with all keys
/// read through member 1 right after the writes and every 5 s.
async fn writes<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    const N: u32 = 2_000;
    rec.start_all_and_settle(SETTLE_MS).await?;
    rec.wait(2_000).await?;
    rec.write(0, 0..N, 16, 500).await?;
    let end = rec.now() + 60_000;
    rec.check_reads(1, 0, 1, N).await?;
    reads_until(rec, end, 5_000, 1, (0, 1, N)).await
}

/// 3 members, RF 2: 5,000 SETs through member 2; `/drain` it; 25 s; SIGTERM it; until it
/// exits and 30 s more; then all keys read through member 0 every 3 s for 30 s.
async fn drain<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    const N: u32 = 5_000;
    rec.start_all_and_settle(SETTLE_MS).await?;
    rec.wait(2_000).await?;
    rec.write(2, 0..N, 16, 1_000).await?;
    rec.wait(3_000).await?;
    rec.drain(2).await?;
    rec.wait(25_000).await?;
    rec.sigterm(2).await?;
    rec.wait_exit(2, 20_000).await?;
    rec.wait(30_000).await?;
    let end = rec.now() + 30_000;
    rec.check_reads(0, 0, 1, N).await?;
    reads_until(rec, end, 3_000, 0, (0, 1, N)).await
}

/// 3 members, RF 2: 180,000 SETs of 1 KiB through member 0 as fast as pipelining goes (more
/// than the 128 MiB ring holds), then every 10th key read through member 1 every 10 s until
/// the repair counters stand still for 21 s (at least 30 s after the writes), at most 180 s.
async fn gap<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    const N: u32 = 180_000;
    const STEP: u32 = 10;
    rec.start_all_and_settle(SETTLE_MS).await?;
    rec.wait(2_000).await?;
    rec.write(0, 0..N, 1024, 1_000).await?;
    let ended = rec.now();
    rec.check_reads(1, 0, STEP, N / STEP).await?;
    let repairs = |r: &Recorder<B>| -> u64 {
        (0..r.members())
            .filter_map(|m| r.latest_metric(m, "ae_repair_ops_total"))
            .sum()
    };
    let mut last = repairs(rec);
    let mut last_change = rec.now();
    while rec.now() < ended + 180_000 {
        rec.wait(10_000).await?;
        let now_repairs = repairs(rec);
        if now_repairs != last {
            last = now_repairs;
            last_change = rec.now();
        }
        rec.check_reads(1, 0, STEP, N / STEP).await?;
        if rec.now() >= ended + 30_000 && rec.now() >= last_change + 21_000 {
            rec.note(format!(
                "repairs stood still at {last} since {last_change} ms: stop"
            ));
            break;
        }
    }
    Ok(())
}

/// 3 members, RF 2: 3,000 SETs through member 1; 10 s; SIGTERM it; 5 s after its exit,
/// start it again on its data; 40 s, reading all keys through it every 5 s once it answers.
async fn restart<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    const N: u32 = 3_000;
    rec.start_all_and_settle(SETTLE_MS).await?;
    rec.wait(2_000).await?;
    rec.write(1, 0..N, 16, 1_000).await?;
    rec.wait(10_000).await?;
    rec.sigterm(1).await?;
    rec.wait_exit(1, 20_000).await?;
    rec.wait(5_000).await?;
    rec.restart(1).await?;
    let end = rec.now() + 40_000;
    while rec.now() < end {
        rec.wait(5_000.min(end - rec.now())).await?;
        if rec.now() < end && rec.latest(1).is_some_and(|o| o.resp.is_some()) {
            rec.check_reads(1, 0, 1, N).await?;
        }
    }
    Ok(())
}

/// 3 members start together: their first 15 s.
async fn idle_start<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    for m in 0..rec.members() {
        rec.start(m).await?;
    }
    rec.wait(15_000).await
}

/// The steady load of [`handoff_load`]: this many SETs of 1 KiB ...
const LOAD_BATCH: u32 = 200;
/// ... every this many milliseconds (2,000 a second).
const LOAD_EVERY_MS: u64 = 100;

/// One step of the steady load through member `m`, from key `*next` on.
async fn load_step<B: Backend>(
    rec: &mut Recorder<B>,
    m: usize,
    next: &mut u32,
) -> anyhow::Result<()> {
    let began = rec.now();
    rec.write(m, *next..*next + LOAD_BATCH, 1024, LOAD_BATCH)
        .await?;
    *next += LOAD_BATCH;
    let spent = rec.now() - began;
    if spent < LOAD_EVERY_MS {
        rec.wait(LOAD_EVERY_MS - spent).await?;
    }
    Ok(())
}

/// The steady load through member `m` until scenario time `until`.
async fn load_until<B: Backend>(
    rec: &mut Recorder<B>,
    m: usize,
    next: &mut u32,
    until: u64,
) -> anyhow::Result<()> {
    while rec.now() < until {
        load_step(rec, m, next).await?;
    }
    Ok(())
}

/// Read the keys through member `m` now and every `every_ms` until none is missing, at most
/// `max_ms`.
async fn reads_until_found<B: Backend>(
    rec: &mut Recorder<B>,
    m: usize,
    (first, step, count): (u32, u32, u32),
    every_ms: u64,
    max_ms: u64,
) -> anyhow::Result<()> {
    let until = rec.now() + max_ms;
    while rec.check_reads(m, first, step, count).await? > 0 && rec.now() + every_ms <= until {
        rec.wait(every_ms).await?;
    }
    Ok(())
}

/// The first key of the burst in [`handoff_load`]'s second phase (above the load's keys).
const BURST_FIRST: u32 = 1_000_000;
const BURST: u32 = 40_000;

/// 4 members, RF 2: a hand-off under a steady load (the operator's removal: drain, wait,
/// SIGTERM, with client writes going on through another member), then a restart with writes
/// its ring had not shipped (a burst larger than the ring, SIGTERM at once).
async fn handoff_load<B: Backend>(rec: &mut Recorder<B>) -> anyhow::Result<()> {
    rec.start_all_and_settle(SETTLE_MS).await?;
    rec.wait(2_000).await?;
    rec.note("phase 1: a hand-off under a steady load through member 0");
    let mut next = 0;
    let t = rec.now();
    load_until(rec, 0, &mut next, t + 10_000).await?;
    rec.drain(3).await?;
    let t = rec.now();
    load_until(rec, 0, &mut next, t + 20_000).await?;
    rec.sigterm(3).await?;
    let t = rec.now();
    while rec.backend.running(3) {
        if rec.now() >= t + 20_000 {
            bail!("member 3 did not exit within 20 s of SIGTERM");
        }
        load_step(rec, 0, &mut next).await?;
    }
    let t = rec.now();
    load_until(rec, 0, &mut next, t + 10_000).await?;
    rec.note(format!("the load wrote keys 0..{next}"));
    reads_until_found(rec, 1, (0, 10, next / 10), 5_000, 60_000).await?;

    rec.note("phase 2: a restart of member 2 with writes its ring had not shipped");
    rec.write(2, BURST_FIRST..BURST_FIRST + BURST, 4096, 1_000)
        .await?;
    rec.sigterm(2).await?;
    rec.wait_exit(2, 30_000).await?;
    rec.wait(5_000).await?;
    rec.restart(2).await?;
    rec.wait_for(60_000, "member 2 answers RESP again", |r| {
        r.latest(2).is_some_and(|o| o.resp.is_some())
    })
    .await?;
    rec.check_reads(2, BURST_FIRST, 1, BURST).await?;
    reads_until_found(rec, 1, (BURST_FIRST, 10, BURST / 10), 10_000, 120_000).await
}
