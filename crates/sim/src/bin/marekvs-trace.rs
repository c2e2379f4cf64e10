//! `marekvs-trace`: records what an operator observes of a real marekvs cluster during a
//! scenario (`record`), and checks the trace properties over a recorded trace (`check`).
#![forbid(unsafe_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, ensure};
use clap::{Parser, Subcommand};
use marekvs_sim::trace::format::Trace;
use marekvs_sim::trace::props;
use marekvs_sim::trace::real::{RealBackend, RealConfig, fresh_root};
use marekvs_sim::trace::recorder::{Recorder, utc_date};
use marekvs_sim::trace::scenario::{self, SCENARIOS};

/// Record and check traces of real marekvs clusters run on loopback.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a scenario on real server processes and write its trace.
    ///
    /// Member m binds all four listeners to <first-ip> + m (loopback only) on the standard
    /// ports, with its data in a fresh directory under --data-dir.
    Record {
        /// The marekvs server binary.
        #[arg(long, env = "MAREKVS_BIN")]
        bin: PathBuf,
        /// writes, drain, gap, restart or idle-start.
        #[arg(long)]
        scenario: String,
        /// Where to write the trace (compact JSON).
        #[arg(long)]
        out: PathBuf,
        /// Base directory for the members' data and logs (a fresh directory is made in it).
        #[arg(long, default_value_os_t = std::env::temp_dir().join("marekvs-trace"))]
        data_dir: PathBuf,
        /// The IP of member 0; member m gets the m-th next one. Must be in 127.0.0.0/8.
        #[arg(long, default_value = "127.77.0.1")]
        first_ip: Ipv4Addr,
        /// Keep the members' data directories (their logs are always kept).
        #[arg(long)]
        keep_data: bool,
    },
    /// Check every trace property over a trace file and print the figures.
    Check {
        /// Trace files.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("marekvs-trace: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    match args.cmd {
        Cmd::Record {
            bin,
            scenario,
            out,
            data_dir,
            first_ip,
            keep_data,
        } => {
            let plan = scenario::plan(&scenario).with_context(|| {
                format!("no scenario {scenario:?} (known: {})", SCENARIOS.join(", "))
            })?;
            ensure!(first_ip.is_loopback(), "--first-ip must be in 127.0.0.0/8");
            let root = fresh_root(&data_dir, &scenario);
            let backend = RealBackend::new(RealConfig {
                bin,
                members: plan.members,
                replicas_n: plan.replicas_n,
                data_root: root.clone(),
                first_ip,
            })?;
            let mut rec = Recorder::new(backend, &scenario, plan.deadline_ms);
            for m in 0..plan.members {
                let ip = rec.backend.ip(m).to_string();
                rec.set_member_ip(m, ip);
            }
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            rec.set_recorded_on(utc_date(secs));
            rec.backend.reset_clock();
            eprintln!(
                "marekvs-trace: {scenario}: members' data and logs in {}",
                root.display()
            );
            let outcome = scenario::run(&mut rec, &scenario).await;
            let trace = rec.finish().await;
            let json = serde_json::to_string(&trace)? + "\n";
            let target = match &outcome {
                Ok(()) => out.clone(),
                Err(_) => out.with_extension("partial.json"),
            };
            std::fs::write(&target, &json)
                .with_context(|| format!("writing {}", target.display()))?;
            if !keep_data {
                for m in 0..plan.members {
                    let _ = std::fs::remove_dir_all(root.join(format!("n{m}")));
                }
            }
            eprintln!(
                "marekvs-trace: wrote {} ({} bytes)",
                target.display(),
                json.len()
            );
            outcome?;
            print_checks(&trace);
            Ok(true)
        }
        Cmd::Check { traces } => {
            let mut all = true;
            for path in traces {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let trace: Trace = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                println!("== {} ({})", path.display(), trace.scenario);
                all &= print_checks(&trace);
            }
            Ok(all)
        }
    }
}

/// Print every property's outcome: whether all held.
fn print_checks(trace: &Trace) -> bool {
    let results = props::check_all(trace);
    for r in &results {
        println!("{r}");
    }
    results.iter().all(|r| r.holds())
}
