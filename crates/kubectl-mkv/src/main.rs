//! `kubectl mkv`: read and operate MarekvsClusters through the same API objects as everything
//! else (the cluster, its status, its members' pods and PVCs). Only `report` reads more: the
//! operator's logs and each member's answers, through the API server (`gather.rs`).
#![forbid(unsafe_code)]

mod gather;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use kubectl_mkv::edit::{self, Edit, PodState, Refused, Wake};
use kubectl_mkv::{age, complete, plan, table, version};
use marekvs_api::MarekvsCluster;

/// Status, plan and safe operations on MarekvsClusters.
#[derive(Parser)]
#[command(name = "kubectl mkv", version)]
struct Cli {
    /// Namespace of the cluster (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// The cluster's phase, what holds it, and a table of its members.
    Status {
        cluster: String,
        /// Print the cluster's status as JSON or YAML instead.
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
    /// What would happen next and what holds it, in words.
    Plan {
        cluster: String,
        /// Print the plan as JSON or YAML instead (the status fields it is read from, and the
        /// same statements).
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
    /// Remove this member, safely: spec.nodes one lower and the member in spec.removeMembers.
    Remove { cluster: String, member: String },
    /// Restart a member on its own volume, or on a fresh one, once drained and handed off.
    Replace {
        cluster: String,
        member: String,
        /// Move it to a fresh, empty volume instead (its data is handed off first).
        #[arg(long)]
        fresh_volume: bool,
    },
    /// Hold every disruptive step (spec.paused: true).
    Pause { cluster: String },
    /// Let disruptive steps go on (spec.paused: false).
    Resume { cluster: String },
    /// Stop every member's pod, keeping volumes and membership (spec.hibernation: true).
    Hibernate { cluster: String },
    /// Bring a hibernated cluster back (spec.hibernation: false).
    Wake {
        cluster: String,
        /// Past storage.staleVolumeGraceSeconds, start every member on an empty volume.
        #[arg(long)]
        fresh_volumes: bool,
        /// Confirm --fresh-volumes: the cluster's data is lost.
        #[arg(long)]
        yes_lose_data: bool,
    },
    /// Stop a member's pod, keeping it a member (spec.fencedMembers).
    Fence { cluster: String, member: String },
    /// Bring a fenced member back.
    Unfence { cluster: String, member: String },
    /// A support bundle (one zip, secrets redacted): the cluster, its pods and PVCs with their
    /// Events, the operator's logs, version and flags, and each member's /metrics and CLUSTER
    /// NODES read through the API server (port-forward).
    #[command(
        after_help = "Needs, besides reading the cluster: list on pods, PVCs, Events and Leases, \
                      get on pods/log, create on pods/portforward, and get on the Secrets the \
                      cluster uses (only to redact them and to AUTH; no Secret is included). \
                      A part that cannot be read is listed in the bundle's README.txt."
    )]
    Report {
        cluster: String,
        /// Operator logs from this long ago on: a number and s, m, h or d.
        #[arg(long, default_value = "1h", value_parser = parse_since)]
        since: i64,
        /// The zip to write (default: mkv-report-<namespace>-<cluster>-<time>.zip); never
        /// overwritten.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// The operator's namespace (default: wherever pods match --operator-selector, or the
        /// cluster's namespace when you may not list pods in all namespaces).
        #[arg(long)]
        operator_namespace: Option<String>,
        /// The label selector of the operator's pods.
        #[arg(long, default_value = "app.kubernetes.io/name=marekvs-operator")]
        operator_selector: String,
    },
    /// The plugin's version and the operator's (as the namespace's clusters record it); warns
    /// when they differ.
    Version {
        /// Only the plugin's version: read nothing from the cluster.
        #[arg(long)]
        client: bool,
    },
    /// A completion script for `kubectl-mkv` in bash, zsh or fish (for `kubectl mkv <TAB>`,
    /// see `kubectl mkv completion --help`).
    #[command(
        after_help = "kubectl completes `kubectl mkv <TAB>` by running an executable named \
                      kubectl_complete-mkv on PATH (kubectl 1.26 and later); make it with:\n\n  \
                      printf '#!/bin/sh\\nexec kubectl-mkv __complete \"$@\"\\n' > ~/.local/bin/kubectl_complete-mkv\n  \
                      chmod +x ~/.local/bin/kubectl_complete-mkv"
    )]
    Completion { shell: Shell },
    /// kubectl's plugin completion (cobra's protocol): the candidates for the last word.
    #[command(name = "__complete", hide = true)]
    Complete {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A client for the chosen kubeconfig and context, and the namespace to work in.
async fn connect(cli: &Cli) -> anyhow::Result<(Client, String)> {
    connect_to(cli, cli.namespace.clone()).await
}

/// As [`connect`], in `namespace` when given (else the context's).
async fn connect_to(cli: &Cli, namespace: Option<String>) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None => Config::from_kubeconfig(&options).await?,
    };
    let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
    Ok((Client::try_from(config)?, namespace))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    match &cli.command {
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "kubectl-mkv", &mut script);
            return Ok(String::from_utf8(script)?);
        }
        Command::Complete { args } => return Ok(completions(&cli, args).await),
        Command::Version { client: true } => return Ok(version::client_line()),
        Command::Version { client: false } => return versions(&cli).await,
        _ => {}
    }
    let (client, ns) = connect(&cli).await?;
    let clusters: Api<MarekvsCluster> = Api::namespaced(client.clone(), &ns);
    let name = cluster_arg(&cli.command);
    // The operator writes status every pass, and a status write moves the object's
    // resourceVersion too: a command whose write conflicts reads the cluster again and decides
    // again on what it reads (its safety rules included), a few times, before it gives up.
    let mut attempt = 1;
    loop {
        let cr = clusters
            .get_opt(name)
            .await
            .with_context(|| format!("reading MarekvsCluster {ns}/{name}"))?
            .with_context(|| format!("no MarekvsCluster {name} in namespace {ns}"))?;
        match act(&cli, &client, &ns, &clusters, &cr).await {
            Err(e) if attempt < CONFLICT_ATTEMPTS && e.downcast_ref::<Conflict>().is_some() => {
                attempt += 1;
            }
            Err(e) => match e.downcast::<Conflict>() {
                Ok(Conflict(message)) => return Err(Refused(message).into()),
                Err(e) => return Err(e),
            },
            Ok(out) => return Ok(out),
        }
    }
}

/// How often a command whose write conflicts is tried in all.
const CONFLICT_ATTEMPTS: u32 = 3;

/// A write refused because the cluster changed since it was read (409).
#[derive(Debug)]
struct Conflict(String);

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Conflict {}

/// The command, on the cluster as read.
async fn act(
    cli: &Cli,
    client: &Client,
    ns: &str,
    clusters: &Api<MarekvsCluster>,
    cr: &MarekvsCluster,
) -> anyhow::Result<String> {
    let (client, ns, cr) = (client.clone(), ns.to_string(), cr.clone());
    let clusters = clusters.clone();
    let name = cluster_arg(&cli.command);
    match &cli.command {
        Command::Status { output, .. } => status(&client, &ns, &cr, *output).await,
        Command::Plan { output: None, .. } => Ok(plan::plan_text(&cr, now_ms())),
        Command::Plan {
            output: Some(o), ..
        } => print_as(*o, &plan::plan_object(&cr, now_ms())),
        Command::Remove { member, .. } => apply(&clusters, name, edit::remove(&cr, member)?).await,
        Command::Replace {
            member,
            fresh_volume,
            ..
        } => replace(&client, &ns, &cr, member, *fresh_volume).await,
        Command::Pause { .. } => apply(&clusters, name, edit::pause(&cr, true)).await,
        Command::Resume { .. } => apply(&clusters, name, edit::pause(&cr, false)).await,
        Command::Hibernate { .. } => apply(&clusters, name, edit::hibernate(&cr)).await,
        Command::Wake {
            fresh_volumes,
            yes_lose_data,
            ..
        } => {
            let how = match (fresh_volumes, yes_lose_data) {
                (false, _) => Wake::OwnVolumes,
                (true, false) => Wake::FreshVolumesUnconfirmed,
                (true, true) => Wake::FreshVolumesConfirmed,
            };
            apply(&clusters, name, edit::wake(&cr, how)?).await
        }
        Command::Report {
            since,
            output,
            operator_namespace,
            operator_selector,
            ..
        } => {
            let opts = gather::Options {
                since_secs: *since,
                output: output.clone(),
                operator_namespace: operator_namespace.clone(),
                operator_selector: operator_selector.clone(),
            };
            gather::report(
                &client,
                &ns,
                &cr,
                &opts,
                k8s_openapi::jiff::Timestamp::now(),
            )
            .await
        }
        Command::Fence { member, .. } => fence(&clusters, &cr, member, true).await,
        Command::Unfence { member, .. } => fence(&clusters, &cr, member, false).await,
        Command::Version { .. } | Command::Completion { .. } | Command::Complete { .. } => {
            unreachable!("answered before connecting")
        }
    }
}

fn parse_since(text: &str) -> Result<i64, String> {
    kubectl_mkv::report::parse_since(text)
}

fn print_as(output: Output, value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(value)? + "\n",
        Output::Yaml => serde_yaml_ng::to_string(value)?,
    })
}

/// `version`: the plugin's, and the operator's from the status of the namespace's clusters.
async fn versions(cli: &Cli) -> anyhow::Result<String> {
    let (client, ns) = connect(cli).await?;
    let clusters: Api<MarekvsCluster> = Api::namespaced(client, &ns);
    let list = clusters
        .list(&Default::default())
        .await
        .with_context(|| format!("listing MarekvsClusters in {ns}"))?;
    let recorded: Vec<(String, Option<String>)> = list
        .items
        .iter()
        .map(|c| {
            let version = c.status.as_ref().and_then(|s| s.operator_version.clone());
            (c.metadata.name.clone().unwrap_or_default(), version)
        })
        .collect();
    let (out, warnings) = version::report(&ns, &recorded);
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(out)
}

/// `__complete`: subcommands, clusters of the namespace, members of a cluster; an API error
/// completes nothing (completion never prints an error into the command line).
async fn completions(cli: &Cli, args: &[String]) -> String {
    let candidates: Vec<String> = match complete::want(args) {
        complete::Want::Command => complete::COMMANDS
            .iter()
            .map(|(c, _)| c.to_string())
            .collect(),
        complete::Want::Shell => ["bash", "zsh", "fish"].map(String::from).to_vec(),
        complete::Want::Nothing => Vec::new(),
        complete::Want::Cluster | complete::Want::Member { .. } => {
            let namespace = complete::namespace(args).or(cli.namespace.clone());
            match connect_to(cli, namespace).await {
                Ok((client, ns)) => {
                    let clusters: Api<MarekvsCluster> = Api::namespaced(client, &ns);
                    match complete::want(args) {
                        complete::Want::Member { cluster } => clusters
                            .get_opt(&cluster)
                            .await
                            .ok()
                            .flatten()
                            .and_then(|c| c.status)
                            .map(|s| s.instance_names)
                            .unwrap_or_default(),
                        _ => clusters
                            .list(&Default::default())
                            .await
                            .map(|l| {
                                l.items
                                    .into_iter()
                                    .filter_map(|c| c.metadata.name)
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }
                }
                Err(_) => Vec::new(),
            }
        }
    };
    complete::answer(args, &candidates)
}

fn cluster_arg(c: &Command) -> &str {
    match c {
        Command::Status { cluster, .. }
        | Command::Plan { cluster, .. }
        | Command::Remove { cluster, .. }
        | Command::Replace { cluster, .. }
        | Command::Pause { cluster }
        | Command::Resume { cluster }
        | Command::Hibernate { cluster }
        | Command::Wake { cluster, .. }
        | Command::Fence { cluster, .. }
        | Command::Unfence { cluster, .. }
        | Command::Report { cluster, .. } => cluster,
        Command::Version { .. } | Command::Completion { .. } | Command::Complete { .. } => "",
    }
}

/// The patch, as a merge patch; a conflict on the resourceVersion read is a refusal.
async fn apply(clusters: &Api<MarekvsCluster>, name: &str, e: Edit) -> anyhow::Result<String> {
    match clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&e.patch))
        .await
    {
        Ok(_) => Ok(e.done + "\n"),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Conflict(format!(
            "{name} changed since it was read ({}), {CONFLICT_ATTEMPTS} times; nothing was written: run the command again",
            s.message
        ))
        .into()),
        Err(e) => Err(e).with_context(|| format!("patching MarekvsCluster {name}")),
    }
}

async fn fence(
    clusters: &Api<MarekvsCluster>,
    cr: &MarekvsCluster,
    member: &str,
    on: bool,
) -> anyhow::Result<String> {
    match edit::fence(cr, member, on)? {
        Some(e) => apply(clusters, cr.metadata.name.as_deref().unwrap_or_default(), e).await,
        None => Ok(format!("{member} is already fenced; nothing to do\n")),
    }
}

async fn replace(
    client: &Client,
    ns: &str,
    cr: &MarekvsCluster,
    member: &str,
    fresh_volume: bool,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods.get_opt(member).await?;
    let state = match &pod {
        None => PodState::Missing,
        Some(p) if p.metadata.deletion_timestamp.is_some() => PodState::Terminating,
        Some(_) => PodState::Running,
    };
    let e = edit::replace(cr, member, fresh_volume, state)?;
    pods.patch(member, &PatchParams::default(), &Patch::Merge(&e.patch))
        .await
        .with_context(|| format!("annotating pod {member}"))?;
    Ok(e.done + "\n")
}

async fn status(
    client: &Client,
    ns: &str,
    cr: &MarekvsCluster,
    output: Option<Output>,
) -> anyhow::Result<String> {
    let status = cr.status.clone().unwrap_or_default();
    if let Some(o) = output {
        return print_as(o, &status);
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut births = table::VolumeBirths::new();
    for pvc in status.members.iter().filter_map(|m| m.pvc.as_deref()) {
        if let Some(p) = pvcs.get_opt(pvc).await?
            && let Some(t) = &p.metadata.creation_timestamp
        {
            births.insert(pvc.to_string(), age::millis(t));
        }
    }
    Ok(table::status_text(cr, &births, now_ms()))
}
