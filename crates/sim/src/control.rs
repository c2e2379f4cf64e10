//! The loopback-only control API tests use to read the simulator's state and inject faults.
//!
//! | method and path | body | effect |
//! |---|---|---|
//! | `GET /state` | | every cluster, member, view, figures, `/drain` requests received, each member's `ring_backlog` now, the data-loss counter, and per cluster `live_keys` (keys whose newest version on a running member is not a tombstone) |
//! | `GET /settings`, `PATCH /settings` | partial `Settings` JSON | load, bootstrap rate and cost per byte (`copy_bytes_per_unit`), gossip and detection delays, SIGTERM times (`flush_ms`, `flush_backlog_max_ms`), ring rate, capacity and skips (`ring_ops_per_sec`, `ring_capacity_ops`, `ring_capacity_bytes`, `ring_skip_fraction`), anti-entropy (`ae_interval_ms`, `ae_jitter_ms`, `ae_drop_probability`, `ae_queue_capacity`, `ae_inbox_capacity`, `ae_frame_limit_bytes`, `ae_scan_records_per_sec`), `read_lease_ms`, `gauge_refresh_ms`, `returning_grace_ms` (applies to running clusters too) |
//! | `GET /members/{ns}/{pod}` | | one member (404 until it has run) |
//! | `PATCH /members/{ns}/{pod}/faults` | partial `Faults` JSON | hang, refuse metrics, garbage / padded / late metrics, non-HTTP answers, `/drain` redirected elsewhere, a stranger in place of a member in `CLUSTER NODES` (`view_stranger_for`), a view padded with blank lines (`view_padding_bytes`), report under-replication, slow copying, hold join/down, disk full or writes stopped; may be set before the pod exists |
//! | `POST /members/{ns}/{pod}/crash` | | kill -9 the member (the pod runner restarts it unless `hold_down`) |

use std::net::SocketAddr;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::Value;

use crate::model::{Faults, Settings};
use crate::world::{SharedWorld, WorldReport};

pub fn router(world: SharedWorld) -> Router {
    Router::new()
        .route("/state", get(state))
        .route("/settings", get(get_settings).patch(patch_settings))
        .route("/members/{ns}/{pod}", get(member))
        .route(
            "/members/{ns}/{pod}/faults",
            patch(patch_faults).get(get_faults),
        )
        .route("/members/{ns}/{pod}/crash", post(crash))
        .with_state(world)
}

pub async fn serve(world: SharedWorld, addr: SocketAddr) -> anyhow::Result<()> {
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "the control API only listens on loopback, not {addr}"
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router(world)).await?;
    Ok(())
}

async fn state(State(world): State<SharedWorld>) -> Json<WorldReport> {
    Json(world.lock().report())
}

async fn get_settings(State(world): State<SharedWorld>) -> Json<Settings> {
    Json(world.lock().settings.clone())
}

/// Merge a partial JSON object into a serializable value.
fn merge<T: serde::Serialize + serde::de::DeserializeOwned>(
    current: &T,
    patch: Value,
) -> Result<T, (StatusCode, String)> {
    let mut v = serde_json::to_value(current)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (Value::Object(base), Value::Object(p)) = (&mut v, patch) else {
        return Err((StatusCode::BAD_REQUEST, "expected a JSON object".into()));
    };
    for (k, val) in p {
        if !base.contains_key(&k) {
            return Err((StatusCode::BAD_REQUEST, format!("unknown field {k}")));
        }
        base.insert(k, val);
    }
    serde_json::from_value(v).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
}

async fn patch_settings(
    State(world): State<SharedWorld>,
    Json(body): Json<Value>,
) -> Result<Json<Settings>, (StatusCode, String)> {
    let mut w = world.lock();
    let next = merge(&w.settings, body)?;
    w.apply_settings(next.clone());
    Ok(Json(next))
}

async fn member(
    State(world): State<SharedWorld>,
    Path((ns, pod)): Path<(String, String)>,
) -> Result<Json<Value>, StatusCode> {
    let key = format!("{ns}/{pod}");
    let report = world.lock().report();
    report
        .clusters
        .into_iter()
        .flat_map(|c| c.members)
        .find(|m| m.key == key)
        .map(|m| Json(serde_json::to_value(m).unwrap_or(Value::Null)))
        .ok_or(StatusCode::NOT_FOUND)
}

async fn get_faults(
    State(world): State<SharedWorld>,
    Path((ns, pod)): Path<(String, String)>,
) -> Json<Faults> {
    Json(world.lock().faults(&format!("{ns}/{pod}")))
}

async fn patch_faults(
    State(world): State<SharedWorld>,
    Path((ns, pod)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<Json<Faults>, (StatusCode, String)> {
    let key = format!("{ns}/{pod}");
    let mut w = world.lock();
    let next = merge(&w.faults(&key), body)?;
    w.set_faults(&key, next.clone());
    Ok(Json(next))
}

async fn crash(
    State(world): State<SharedWorld>,
    Path((ns, pod)): Path<(String, String)>,
) -> StatusCode {
    let key = format!("{ns}/{pod}");
    let mut w = world.lock();
    if w.is_running(&key) {
        w.kill(&key);
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}
