//! `make bench`: reported numbers, not pass/fail. Runs against the local control plane and the
//! simulator that `hack/bench.sh` brings up (the same environment variables as the e2e suite).
//!
//!   bench steps    [--runs N]                 8 → 3 scale-downs: step latency, wall time vs the
//!                                             data plane's own minimum
//!   bench replace  [--runs N]                 pod deleted → replacement created, ours vs the
//!                                             StatefulSet controller
//!   bench scale    [--clusters N] [--members N] [--steady-seconds N] [--batch N]
//!                                             many clusters (created N at a time, default 20):
//!                                             reconcile latency, RSS, CPU, API requests by
//!                                             verb in steady state
//!   bench failover [--clusters N] [--members N] [--runs N] [--batch N] [--after-seconds N]
//!                                             N clusters under a leader with a standby (both
//!                                             electing); SIGKILL the leader: kill → lease
//!                                             acquired, acquired → first full pass, peak
//!                                             scrapes in flight, API writes during the pass
//!                                             and the N seconds after
//!   bench load     [--bound-seconds N] [--percent P,...]
//!                                             5 → 4 under a steady write load through the
//!                                             client Service at P % of the simulated
//!                                             ring-gap rate (default 0,25,50,100,150): time
//!                                             to complete (or held, why, after N s, default
//!                                             120), keys written, keys lost
//!   bench ladder   [--rates R,...] [--seconds N] [--connections N] [--bound-seconds N]
//!                                             at each rate (default 250,500,1000 SET/s) over
//!                                             N pooled connections (default 8) opened through
//!                                             the client Service before anything else and
//!                                             kept, as behind kube-proxy: first the data
//!                                             plane alone (N s of load, default 120, then
//!                                             every key read back through one member that
//!                                             wrote none, within the bound, default 300 s),
//!                                             then a 5 → 4 under the same load (time, keys
//!                                             lost). Real members (MAREKVS_BIN) or simulated
//!   bench pinned   [--rate R] [--seconds N]   a client writing R SET/s (default 200) to the
//!                                             leaver's pod address through a 5 → 4: how long
//!                                             it holds, what status says, and, once it stops
//!                                             after N s (default 60), the time to complete
//!                                             and keys lost
//!   bench control  [--rates R,...] [--seconds N] [--connections N] [--value-bytes N]
//!                  [--burst N] [--burst-value-bytes N] [--bound-seconds N]
//!                                             the control of the fast-leaver tests: the same
//!                                             load with no operator action. With --burst N,
//!                                             first N keys (default 0) of N bytes (default
//!                                             64) through bench-4 as fast as the harness
//!                                             writes; then at each rate
//!                                             (default 500,1000,2000 SET/s) N connections
//!                                             (default 4) on bench-4's pod address for N s
//!                                             (default 30), values of N bytes (default 1024);
//!                                             every key read back through bench-0 within the
//!                                             bound (default 300 s): keys lost, read time.
//!                                             Meant for real members (MAREKVS_BIN)
//!   bench trap     [--rf R] [--keys N] [--bound-seconds N]
//!                                             the hand-off trap: N keys of 1 KiB (default
//!                                             200,000) written through the two members a
//!                                             scale-down from R + 3 to R + 1 members removes
//!                                             (5 → 3 at RF 2), then that; every key read
//!                                             back through a survivor that wrote none: keys
//!                                             lost, write, scale-down and read times. Meant
//!                                             for real members (MAREKVS_BIN); not in `all`
//!
//! Every figure is printed as a line starting with `RESULT` (tab-separated), for the table in
//! docs/benchmarks.md.
//!
//! One file per benchmark; `prom.rs` reads Prometheus text (through the core's parser),
//! `common.rs` holds what several benchmarks share.
#![forbid(unsafe_code)]

mod common;
mod control;
mod failover;
mod ladder;
mod load;
mod pinned;
mod prom;
mod replace;
mod scale;
mod steps;
mod trap;

use std::time::Duration;

use control::control;
use failover::failover;
use ladder::ladder;
use load::load;
use pinned::pinned;
use replace::replace;
use scale::scale;
use steps::steps;
use trap::trap;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of numbers (`--rates 250,500`), or the default.
fn list(args: &[String], name: &str, default: &[u64]) -> Vec<u64> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// `--percent 0,25,50`: the loads to run, in percent of the ring-gap rate.
fn percents(args: &[String]) -> Vec<u64> {
    args.iter()
        .position(|a| a == "--percent")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 25, 50, 100, 150])
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("all");
    let scale_with_args = || {
        scale(
            arg(&args, "--clusters", 200),
            arg(&args, "--members", 8),
            arg(&args, "--steady-seconds", 120),
            arg(&args, "--batch", 20),
        )
    };
    let failover_with_args = || {
        failover(
            arg(&args, "--clusters", 200),
            arg(&args, "--members", 8),
            arg(&args, "--runs", 3),
            arg(&args, "--batch", 20),
            arg(&args, "--after-seconds", 60),
        )
    };
    match what {
        "steps" => steps(arg(&args, "--runs", 3)).await,
        "replace" => replace(arg(&args, "--runs", 20)).await,
        "scale" => scale_with_args().await,
        "failover" => failover_with_args().await,
        "load" => load(&percents(&args), arg(&args, "--bound-seconds", 120)).await,
        "ladder" => {
            ladder(
                &list(&args, "--rates", &[250, 500, 1000]),
                Duration::from_secs(arg(&args, "--seconds", 120)),
                arg(&args, "--connections", 8) as usize,
                Duration::from_secs(arg(&args, "--bound-seconds", 300)),
            )
            .await
        }
        "pinned" => {
            pinned(
                arg(&args, "--rate", 200) as f64,
                Duration::from_secs(arg(&args, "--seconds", 60)),
            )
            .await
        }
        "control" => {
            control(
                &list(&args, "--rates", &[500, 1000, 2000]),
                Duration::from_secs(arg(&args, "--seconds", 30)),
                arg(&args, "--connections", 4) as usize,
                arg(&args, "--value-bytes", 1024) as usize,
                arg(&args, "--burst", 0) as usize,
                arg(&args, "--burst-value-bytes", 64) as usize,
                Duration::from_secs(arg(&args, "--bound-seconds", 300)),
            )
            .await
        }
        "trap" => {
            trap(
                arg(&args, "--rf", 2) as u32,
                arg(&args, "--keys", 200_000) as usize,
                Duration::from_secs(arg(&args, "--bound-seconds", 1800)),
            )
            .await
        }
        "all" => {
            steps(arg(&args, "--runs", 3)).await?;
            replace(arg(&args, "--runs", 20)).await?;
            scale_with_args().await?;
            failover_with_args().await?;
            load(&percents(&args), arg(&args, "--bound-seconds", 120)).await
        }
        other => {
            anyhow::bail!(
                "unknown benchmark {other:?}: steps, replace, scale, failover, load, ladder, pinned, control, trap or all"
            )
        }
    }
}
