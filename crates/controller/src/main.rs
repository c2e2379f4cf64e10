//! `marekvs-operator`: runs the MarekvsCluster controller, checks an install, or prints its CRD.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand, ValueEnum};
use kube::CustomResourceExt;
use marekvs_api::MarekvsCluster;
use tracing::error;

use marekvs_operator::{check, controller, lease, telemetry, term};

/// Kubernetes operator for marekvs: creates each member's Pod and PVC with ordinal identity,
/// scales down one chosen, drained member at a time behind a hand-off gate, and replaces
/// members whose pod or PVC is deleted.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (uses KUBECONFIG, or the in-cluster service account). A flag given
    /// twice takes its last value (the chart's `extraArgs` override its own flags).
    #[command(args_override_self = true)]
    Run {
        /// Watch only this namespace (default: all namespaces).
        #[arg(long, env = "MAREKVS_OPERATOR_NAMESPACE")]
        namespace: Option<String>,
        /// Timeout of one member scrape or drain call, in milliseconds.
        #[arg(long, default_value_t = 1500)]
        member_timeout_ms: u64,
        /// Member reads in flight at once (a /metrics scrape or a view read over RESP),
        /// across every cluster. A read that finds no free slot within the member timeout is
        /// not run and counts as unknown.
        #[arg(long, default_value_t = marekvs_operator::scrape::DEFAULT_MAX_CONCURRENT_SCRAPES,
              value_parser = clap::value_parser!(u16).range(1..).map(usize::from),
              env = "MAREKVS_OPERATOR_MAX_CONCURRENT_SCRAPES")]
        max_concurrent_scrapes: usize,
        /// Bytes of member answers that every read in flight may hold together (the line of
        /// /metrics being parsed, a CLUSTER NODES reply). A read whose buffer does not fit
        /// waits, within the member timeout. At least one whole view (1 MiB); the default
        /// holds 64 full views at once, so at the default concurrency no read waits.
        #[arg(long, default_value_t = marekvs_operator::budget::DEFAULT_MEMBER_READ_BUDGET_BYTES,
              value_parser = clap::value_parser!(u32)
                  .range(marekvs_operator::views::MIN_READ_BUDGET_BYTES as i64..)
                  .map(|b| b as usize),
              env = "MAREKVS_OPERATOR_MEMBER_READ_BUDGET_BYTES")]
        member_read_budget_bytes: usize,
        /// Cluster DNS domain, for the gossip seed name.
        #[arg(long, default_value = "cluster.local")]
        cluster_domain: String,
        #[command(flatten)]
        lease: LeaseFlags,
        /// Where to serve /metrics (Prometheus text), /healthz and /readyz. Port 0 picks a
        /// free port (it is logged).
        #[arg(
            long,
            default_value = "0.0.0.0:8080",
            env = "MAREKVS_OPERATOR_METRICS_ADDR"
        )]
        metrics_addr: std::net::SocketAddr,
        /// Log format: `text` for people, `json` (one object per line) for log collectors.
        /// The level filter is RUST_LOG (default `info,kube=warn`).
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "MAREKVS_OPERATOR_LOG_FORMAT")]
        log_format: LogFormat,
    },
    /// Check that an install works, as the operator's ServiceAccount (the chart's `helm
    /// test`): MarekvsClusters are served and may be listed in the scope given, and, with leader
    /// election, the Lease is held and renewed within its duration. Prints one line and exits
    /// 0, or prints the reason and exits 1. Takes `run`'s scope and Lease flags.
    #[command(args_override_self = true)]
    Check {
        /// The watched namespace (default: every namespace).
        #[arg(long, env = "MAREKVS_OPERATOR_NAMESPACE")]
        namespace: Option<String>,
        #[command(flatten)]
        lease: LeaseFlags,
    },
    /// Print the CustomResourceDefinition as YAML.
    Crd,
}

/// The leader Lease's namespace: the flag, else the pod's namespace, else the watched one,
/// else marekvs-system.
/// The leader election flags, the same for `run` and `check` (which checks the Lease `run`
/// holds).
#[derive(clap::Args, Debug)]
struct LeaseFlags {
    /// Run only while holding the leader Lease, so several replicas can run (the others
    /// stand by). `--leader-elect=false` for a single replica.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader Lease (default: POD_NAMESPACE, else --namespace, else
    /// marekvs-system).
    #[arg(long, env = "MAREKVS_OPERATOR_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, default_value = "marekvs-operator")]
    lease_name: String,
    /// A standby takes over once it has seen the leader's Lease record unchanged for this
    /// long, timed on its own clock; the leader stops itself when it has not renewed within
    /// two thirds of it.
    #[arg(long, default_value_t = 15, env = "MAREKVS_OPERATOR_LEASE_SECONDS")]
    lease_duration_seconds: u64,
}

fn lease_namespace(flag: Option<String>, watched: Option<&String>) -> String {
    flag.or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| watched.cloned())
        .unwrap_or_else(|| "marekvs-system".into())
}

/// How log lines are written (to stdout).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (timestamp, level, target, message and fields), for log
    /// collectors.
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Command::Crd => {
            print!("{}", serde_yaml_ng::to_string(&MarekvsCluster::crd())?);
            Ok(())
        }
        Command::Check {
            namespace,
            lease:
                LeaseFlags {
                    leader_elect,
                    lease_namespace: lease_ns,
                    lease_name,
                    lease_duration_seconds,
                },
        } => {
            let duration = Duration::from_secs(lease_duration_seconds.max(2));
            let target = check::Target {
                lease: leader_elect.then(|| check::LeaseTarget {
                    namespace: lease_namespace(lease_ns, namespace.as_ref()),
                    name: lease_name,
                    duration,
                }),
                namespace,
            };
            // Bounded: the Lease is watched for at most its duration, each request has the
            // client's own timeouts; this is the bound of the whole.
            let outcome = tokio::time::timeout(duration + Duration::from_secs(30), async {
                let mut config = kube::Config::infer()
                    .await
                    .map_err(|e| format!("no Kubernetes config: {e}"))?;
                config
                    .headers
                    .push((http::header::USER_AGENT, telemetry::user_agent("check")));
                let client = kube::Client::try_from(config)
                    .map_err(|e| format!("building the API client: {e}"))?;
                check::run(client, &target).await
            })
            .await
            .unwrap_or_else(|_| Err("the check did not finish in time".into()));
            match outcome {
                Ok(line) => {
                    println!("ok: {line}");
                    Ok(())
                }
                Err(reason) => {
                    eprintln!("marekvs-operator check: {reason}");
                    std::process::exit(1);
                }
            }
        }
        Command::Run {
            namespace,
            member_timeout_ms,
            max_concurrent_scrapes,
            member_read_budget_bytes,
            cluster_domain,
            lease:
                LeaseFlags {
                    leader_elect,
                    lease_namespace,
                    lease_name,
                    lease_duration_seconds,
                },
            metrics_addr,
            log_format,
        } => {
            init_logging(log_format);
            let metrics = Arc::new(telemetry::Metrics::default());
            telemetry::serve(metrics.clone(), metrics_addr).await?;
            // The replica's identity: the Lease holder's, and in its User-Agent, so that the
            // API server's audit log tells the replicas apart.
            let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
                format!(
                    "{}-{}",
                    std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into()),
                    std::process::id()
                )
            });
            let mut config = kube::Config::infer().await?;
            config
                .headers
                .push((http::header::USER_AGENT, telemetry::user_agent(&identity)));
            let lease_duration = Duration::from_secs(lease_duration_seconds.max(2));
            let (term, change_timeout) = if leader_elect {
                // Every change is sent within the term, and none outlasts the margin between
                // the renew deadline (2/3 of the lease) and the lease's end.
                (term::Term::not_leading(), lease_duration / 4)
            } else {
                (term::Term::unbounded(), Duration::from_secs(30))
            };
            let client = kube::client::ClientBuilder::try_from(config)?
                .with_layer(&term::GuardMutations {
                    term: term.clone(),
                    timeout: change_timeout,
                })
                .with_layer(&telemetry::CountRequests(metrics.clone()))
                .build();
            let controller = controller::run(
                client.clone(),
                namespace.clone(),
                controller::Members {
                    timeout: Duration::from_millis(member_timeout_ms),
                    max_concurrent_scrapes,
                    read_budget_bytes: member_read_budget_bytes,
                },
                cluster_domain,
                metrics.clone(),
            );
            if !leader_elect {
                metrics.lead();
                return controller.await;
            }
            // A standby is ready: it is doing its job (waiting to take over).
            metrics.ready.store(true, Ordering::Relaxed);
            let lease_ns = crate::lease_namespace(lease_namespace, namespace.as_ref());
            let elector =
                lease::Elector::new(client, &lease_ns, &lease_name, &identity, lease_duration)
                    .with_term(term);
            let term_start = elector.acquire().await;
            metrics.lead();
            metrics.ready.store(false, Ordering::Relaxed);
            tokio::select! {
                // The term first: once it is lost, the controller is not polled again.
                biased;
                lost = elector.hold(term_start) => {
                    // Exit at once: a deposed leader must not write anything more (the
                    // client's guard refuses changes already, `term`).
                    error!(lease = %lease_name, "leadership lost: {lost}; exiting");
                    std::process::exit(3);
                }
                r = controller => {
                    elector.release().await;
                    r
                }
            }
        }
    }
}
