//! The hand-off trap: everything written through the two members a 5 → 3 removes.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use marekvs_e2e::*;
use serde_json::{Value, json};

use crate::common::T;

/// `keys` keys of 1 KiB written through the two highest ordinals, which the scale-down to
/// replicationFactor + 1 members removes (5 → 3 at RF 2, 6 → 4 at RF 3: the floor), then that
/// scale-down, then every key read back through trap-0, which wrote none.
pub async fn trap(rf: u32, keys: usize, bound: Duration) -> anyhow::Result<()> {
    let env = TestEnv::new("bench-trap").await?;
    let ns = env.namespace.clone();
    let log = std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into());
    let _op = Operator::start_with(&ns, &[("RUST_LOG", log.as_str())])?;
    let (from, to) = (rf + 3, rf + 1);
    let mut cluster = spec(from);
    cluster["replicationFactor"] = json!(rf);
    let api = create(&env, "trap", cluster).await?;
    let all: Vec<String> = (0..from).map(|i| format!("trap-{i}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    wait_healthy(&api, "trap", &all, T).await?;
    let pods: Api<Pod> = env.api();
    let written = Instant::now();
    let leavers = &all[to as usize..];
    let data = data::DataSet::write_sized(&pods, leavers, "trap-0", keys, "trap", 1024).await?;
    let write_s = written.elapsed().as_secs_f64();
    println!(
        "# trap rf {rf}: {} keys of 1 KiB written through {:?} in {write_s:.1}s; {from} → {to}",
        data.len(),
        data.written_through()
    );
    let started = Instant::now();
    let recorder = record_status(api.clone(), "trap", &ns);
    patch_spec(&api, "trap", json!({"nodes": to})).await?;
    let scaled = wait_healthy(&api, "trap", &all[..to as usize], bound).await;
    recorder.abort();
    let scale_s = started.elapsed().as_secs_f64();
    if let Err(e) = &scaled {
        println!("# trap rf {rf}: the {from} → {to} did not complete within {bound:?}: {e:#}");
    }
    let reading = Instant::now();
    let lost = match data.verify_within(&pods, data::bound()).await {
        Ok(_) => 0,
        Err(e) => match e.downcast_ref::<data::Lost>() {
            Some(l) => {
                println!("# trap rf {rf}: {l}");
                for k in &l.missing {
                    eprintln!("trap lost key: {k}");
                }
                // Where the lost keys are: a survivor's own store, read without read-through.
                for (member, held) in data
                    .local_holders(&pods, &all[..to as usize], &l.missing)
                    .await
                {
                    match held {
                        Ok(n) => println!(
                            "# trap rf {rf}: {member} holds {n} of the {} lost keys",
                            l.missing.len()
                        ),
                        Err(e) => println!("# trap rf {rf}: {member}: {e:#}"),
                    }
                }
                l.missing.len()
            }
            None => return Err(e),
        },
    };
    let read_s = reading.elapsed().as_secs_f64();
    let outcome = if scaled.is_ok() { "completed" } else { "held" };
    println!(
        "RESULT\ttrap\trf={rf}\tkeys={}\tlost={lost}\t{from}to{to}={outcome}\tscale_s={scale_s:.1}\twrite_s={write_s:.1}\tread_s={read_s:.1}",
        data.len()
    );
    env.cleanup().await
}

/// Every 2 s until aborted, the cluster's removal, hand-off hold and each member's quiet
/// record (rounds, bytes unacknowledged, sent count) as one JSON line, when any of them changed,
/// appended to `status-<namespace>.log` beside the operator's log: what the gate saw, to read
/// after a run that lost keys.
fn record_status(
    api: Api<marekvs_api::MarekvsCluster>,
    name: &'static str,
    namespace: &str,
) -> tokio::task::JoinHandle<()> {
    let dir = std::env::var("MAREKVS_E2E_LOG_DIR")
        .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    let path = format!("{dir}/status-{namespace}.log");
    tokio::spawn(async move {
        use std::io::Write;
        let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        else {
            eprintln!("# status recorder: cannot open {path}");
            return;
        };
        let mut last = String::new();
        loop {
            if let Ok(c) = api.get(name).await {
                let status = serde_json::to_value(&c.status).unwrap_or(Value::Null);
                let members: Vec<Value> = status["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let x = &m["metrics"];
                        json!([
                            m["name"],
                            m["phase"],
                            m["quietReset"],
                            m["quietSince"],
                            m["roundsAtQuiet"],
                            x["aeRoundsTotal"],
                            x["replInflightBytes"],
                            x["replOpsSentTotal"],
                            m["sentChangedAt"],
                            x["aeRepairOpsTotal"],
                            x["underreplicatedPartitions"]
                        ])
                    })
                    .collect();
                let line = json!({"removal": status["removal"], "hold": status["handoffHold"], "members": members})
                    .to_string();
                if line != last {
                    let unix = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    let _ = writeln!(file, "{unix:.3} {line}");
                    last = line;
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}
