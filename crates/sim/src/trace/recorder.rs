//! Drives a [`Backend`] for a scenario and records the [`Trace`]: samples every running member
//! each interval, notices exits, and logs what the scenario does as events.

use std::ops::Range;

use anyhow::{bail, ensure};

use super::backend::{Backend, Observation, RespView};
use super::format::{Event, FORMAT_VERSION, MAX_MISSING_LISTED, Member, SERIES, Trace, View, What};

/// The sampling period.
pub const INTERVAL_MS: u64 = 500;
/// How often waits poll for exits (the precision of exit times).
const POLL_MS: u64 = 50;
/// Keys per pipelined batch of reads.
const READ_BATCH: usize = 1000;

pub struct Recorder<B: Backend> {
    pub backend: B,
    trace: Trace,
    next_sample: u64,
    deadline_ms: u64,
    latest: Vec<Option<Observation>>,
    last_view: Vec<Option<RespView>>,
    /// Per member, per sample: whether `/metrics` answered.
    answered: Vec<Vec<bool>>,
}

impl<B: Backend> Recorder<B> {
    /// A recorder that fails any step after `deadline_ms`.
    pub fn new(backend: B, scenario: &str, deadline_ms: u64) -> Self {
        let n = backend.members();
        let trace = Trace {
            format: FORMAT_VERSION,
            scenario: scenario.to_string(),
            marekvs_version: String::new(),
            recorded_on: String::new(),
            replicas_n: backend.replicas_n(),
            interval_ms: INTERVAL_MS,
            members: (0..n)
                .map(|m| Member {
                    ordinal: m as u16,
                    ..Member::default()
                })
                .collect(),
            events: Vec::new(),
        };
        Recorder {
            backend,
            trace,
            next_sample: 0,
            deadline_ms,
            latest: vec![None; n],
            last_view: vec![None; n],
            answered: vec![Vec::new(); n],
        }
    }

    pub fn set_member_ip(&mut self, m: usize, ip: String) {
        self.trace.members[m].ip = ip;
    }

    pub fn set_recorded_on(&mut self, date: String) {
        self.trace.recorded_on = date;
    }

    pub fn now(&self) -> u64 {
        self.backend.now_ms()
    }

    pub fn members(&self) -> usize {
        self.backend.members()
    }

    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    pub fn event(&mut self, what: What) {
        let t = self.now();
        self.event_at(t, what);
    }

    fn event_at(&mut self, t: u64, what: What) {
        self.trace.events.push(Event { t, what });
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.event(What::Note { text: text.into() });
    }

    /// The latest observation of member `m` (`None` before its first or after it exited).
    pub fn latest(&self, m: usize) -> Option<&Observation> {
        self.latest[m].as_ref()
    }

    /// Its latest value of series `name`.
    pub fn latest_metric(&self, m: usize, name: &str) -> Option<u64> {
        self.latest(m)?.metrics.as_ref()?.get(name)
    }

    /// Every member runs, reads ready and counts every member in its view.
    pub fn settled(&self) -> bool {
        let n = self.members() as u64;
        (0..self.members()).all(|m| {
            self.latest(m).is_some_and(|o| {
                o.ready == Some(200)
                    && o.resp.is_some()
                    && o.metrics
                        .as_ref()
                        .is_some_and(|x| x.get("cluster_members") == Some(n))
            })
        })
    }

    pub async fn start(&mut self, m: usize) -> anyhow::Result<()> {
        self.backend.start(m).await?;
        self.event(What::Start { m });
        Ok(())
    }

    pub async fn restart(&mut self, m: usize) -> anyhow::Result<()> {
        self.backend.restart(m).await?;
        self.event(What::Restart { m });
        Ok(())
    }

    /// Notice exits, and sample every running member if a sample is due.
    pub async fn tick(&mut self) -> anyhow::Result<()> {
        let now = self.now();
        ensure!(
            now <= self.deadline_ms,
            "scenario deadline of {} ms passed",
            self.deadline_ms
        );
        self.poll_exits();
        if now >= self.next_sample {
            for m in 0..self.members() {
                if self.backend.running(m) {
                    let t = self.now();
                    let obs = self.backend.observe(m).await;
                    self.record(m, t, obs);
                }
            }
            // Skip ahead rather than bunch samples after a slow step.
            self.next_sample = (self.next_sample + INTERVAL_MS).max(now + INTERVAL_MS / 2);
            self.poll_exits();
        }
        Ok(())
    }

    fn poll_exits(&mut self) {
        for m in 0..self.members() {
            if self.backend.running(m)
                && let Some(exit) = self.backend.take_exit(m)
            {
                self.latest[m] = None;
                self.event(What::Exit {
                    m,
                    code: exit.code,
                    signal: exit.signal,
                });
            }
        }
    }

    fn record(&mut self, m: usize, t: u64, obs: Observation) {
        if self.trace.marekvs_version.is_empty()
            && let Some(v) = obs.metrics.as_ref().and_then(|x| x.version.clone())
        {
            self.trace.marekvs_version = v;
        }
        let member = &mut self.trace.members[m];
        let s = &mut member.samples;
        let i = s.t.len();
        s.t.push(t);
        s.ready.push(obs.ready.unwrap_or(0));
        s.resp.push(u8::from(obs.resp.is_some()));
        let answered = &mut self.answered[m];
        answered.push(obs.metrics.is_some());
        for name in SERIES {
            s.metrics
                .entry(name.to_string())
                .or_default()
                .push(obs.metrics.as_ref().and_then(|x| x.get(name)));
        }
        if let Some(x) = &obs.metrics {
            for cmd in x.commands.keys() {
                if !s.commands.contains_key(cmd) {
                    // Before its first use a command counts 0 where the scrape answered.
                    let back = answered[..i].iter().map(|a| a.then_some(0)).collect();
                    s.commands.insert(cmd.clone(), back);
                }
            }
        }
        for (cmd, col) in s.commands.iter_mut() {
            col.push(
                obs.metrics
                    .as_ref()
                    .map(|x| x.commands.get(cmd).copied().unwrap_or(0)),
            );
        }
        if let Some(view) = &obs.resp
            && self.last_view[m].as_ref() != Some(view)
        {
            member.views.push(View {
                t,
                myid: view.myid.clone(),
                nodes: view.nodes.clone(),
            });
            self.last_view[m] = Some(view.clone());
        }
        self.latest[m] = Some(obs);
    }

    /// Keep sampling for `ms`.
    pub async fn wait(&mut self, ms: u64) -> anyhow::Result<()> {
        let until = self.now() + ms;
        loop {
            self.tick().await?;
            let now = self.now();
            if now >= until {
                return Ok(());
            }
            self.backend.sleep_ms(POLL_MS.min(until - now)).await;
        }
    }

    /// Keep sampling until `cond` holds (checked after each poll), at most `max_ms`: when it
    /// held, or an error naming `what`.
    pub async fn wait_for(
        &mut self,
        max_ms: u64,
        what: &str,
        cond: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<u64> {
        let until = self.now() + max_ms;
        loop {
            self.tick().await?;
            if cond(self) {
                return Ok(self.now());
            }
            if self.now() >= until {
                bail!("{what}: not within {max_ms} ms");
            }
            self.backend.sleep_ms(POLL_MS).await;
        }
    }

    /// Start every member, then wait until all are ready and see each other.
    pub async fn start_all_and_settle(&mut self, max_ms: u64) -> anyhow::Result<()> {
        for m in 0..self.members() {
            self.start(m).await?;
        }
        let at = self
            .wait_for(max_ms, "all members ready in full views", Self::settled)
            .await?;
        self.note(format!("settled: all ready with full views at {at} ms"));
        Ok(())
    }

    /// Pipelined `SET`s of `keys` through member `m`, `batch` at a time, sampling in between:
    /// how many were acknowledged.
    pub async fn write(
        &mut self,
        m: usize,
        keys: Range<u32>,
        value_bytes: u32,
        batch: u32,
    ) -> anyhow::Result<u32> {
        self.event(What::WritesBegun {
            m,
            first: keys.start,
            count: keys.len() as u32,
            value_bytes,
        });
        let mut acked = 0;
        let mut next = keys.start;
        while next < keys.end {
            self.tick().await?;
            let end = (next + batch).min(keys.end);
            match self.backend.set(m, next..end, value_bytes as usize).await {
                Ok(n) => acked += n,
                Err(e) => {
                    self.note(format!("writes through {m} stopped at key {next}: {e:#}"));
                    break;
                }
            }
            next = end;
        }
        self.event(What::WritesEnded {
            m,
            acked,
            failed: keys.len() as u32 - acked,
        });
        self.tick().await?;
        Ok(acked)
    }

    /// `GET` of the keys `first, first + step, ...` (`count` of them) through member `m`,
    /// recorded as a [`What::Reads`] event: how many were missing.
    pub async fn check_reads(
        &mut self,
        m: usize,
        first: u32,
        step: u32,
        count: u32,
    ) -> anyhow::Result<u32> {
        let t = self.now();
        let keys: Vec<u32> = (0..count).map(|k| first + k * step).collect();
        let mut missing_keys = Vec::new();
        let mut missing = 0u32;
        let mut checked = 0u32;
        for chunk in keys.chunks(READ_BATCH) {
            self.tick().await?;
            match self.backend.get(m, chunk).await {
                Ok(found) => {
                    checked += chunk.len() as u32;
                    for (k, ok) in chunk.iter().zip(found) {
                        if !ok {
                            missing += 1;
                            if missing_keys.len() < MAX_MISSING_LISTED {
                                missing_keys.push(*k);
                            }
                        }
                    }
                }
                Err(e) => {
                    self.note(format!("reads through {m} stopped: {e:#}"));
                    break;
                }
            }
        }
        let ms = self.now() - t;
        self.event_at(
            t,
            What::Reads {
                m,
                first,
                step,
                checked,
                found: checked - missing,
                missing,
                truncated: (missing as usize) > missing_keys.len(),
                missing_keys,
                ms,
            },
        );
        self.tick().await?;
        Ok(missing)
    }

    pub async fn drain(&mut self, m: usize) -> anyhow::Result<()> {
        let t = self.now();
        let (status, body) = self.backend.drain(m).await;
        self.event_at(t, What::Drain { m, status, body });
        self.tick().await
    }

    /// SIGTERM to member `m`, recorded at the time it was about to be sent (so the delay to
    /// its exit is never under-measured).
    pub async fn sigterm(&mut self, m: usize) -> anyhow::Result<()> {
        let t = self.now();
        self.backend.sigterm(m).await?;
        self.event_at(t, What::Sigterm { m });
        self.tick().await
    }

    /// Sample until member `m`'s exit is seen, at most `max_ms`: when.
    pub async fn wait_exit(&mut self, m: usize, max_ms: u64) -> anyhow::Result<u64> {
        self.wait_for(max_ms, &format!("member {m} exits"), |r| {
            !r.backend.running(m)
        })
        .await
    }

    /// Stop every member and hand over the trace.
    pub async fn finish(mut self) -> Trace {
        self.backend.stop_all().await;
        self.trace
    }
}

/// `YYYY-MM-DD` (UTC) of a Unix time in seconds.
pub fn utc_date(unix_secs: u64) -> String {
    // Days to civil date (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_798_675_200), "2026-12-31");
    }
}
