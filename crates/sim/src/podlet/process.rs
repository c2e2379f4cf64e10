//! The process behind a pod (simulated member, real member or operator) and the slot that
//! stops and forgets it.

use crate::node_http::NodeServer;
use crate::node_resp::RespServer;
use crate::real_node::{Exit, RealNode};
use crate::world::SharedWorld;

use super::RealMembers;

/// The member process behind a pod.
pub(super) enum MemberProcess {
    /// A simulated member: its HTTP and RESP servers stop when it is dropped.
    Sim {
        key: String,
        _http: NodeServer,
        _resp: RespServer,
    },
    Real {
        node: Box<RealNode>,
        cluster: String,
    },
    /// The operator binary, for a pod of the operator image ([`crate::operator_pod`]).
    Operator { node: Box<RealNode> },
}

impl MemberProcess {
    async fn terminate(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().terminate(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => {
                node.terminate().await
            }
        }
    }

    fn kill(&mut self, world: &SharedWorld) {
        match self {
            MemberProcess::Sim { key, .. } => world.lock().kill(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.kill(),
        }
    }

    fn exited(&mut self, world: &SharedWorld) -> bool {
        match self {
            MemberProcess::Sim { key, .. } => !world.lock().is_running(key),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.exited(),
        }
    }

    /// How it ended, once it has. A simulated member only ends on its own when the control
    /// API kills it.
    fn exit(&mut self, world: &SharedWorld) -> Option<Exit> {
        match self {
            MemberProcess::Sim { key, .. } => (!world.lock().is_running(key)).then(|| Exit {
                code: 137,
                message: "killed by the simulator control API (kill -9)".into(),
            }),
            MemberProcess::Real { node, .. } | MemberProcess::Operator { node } => node.exit(),
        }
    }
}

pub(super) fn forget_real(registry: &RealMembers, cluster: &str, key: &str) {
    let mut reg = registry.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = reg.get_mut(cluster) {
        m.remove(key);
    }
}

/// The one place a pod's member process is kept. Whenever it is emptied or dropped (the pod's
/// worker returned, failed on any `?`, or was cancelled), the process is killed and taken out
/// of the model or the seeds: a member left behind would stay up in the model (its volume still
/// answering reads and counting as a copy) or stay a seed, on a pod IP that is handed out again.
pub(super) struct MemberSlot {
    world: SharedWorld,
    real_members: RealMembers,
    key: String,
    pub(super) process: Option<MemberProcess>,
}

impl MemberSlot {
    pub(super) fn new(world: SharedWorld, real_members: RealMembers, key: String) -> Self {
        MemberSlot {
            world,
            real_members,
            key,
            process: None,
        }
    }

    pub(super) fn set(&mut self, process: MemberProcess) {
        self.stop();
        self.process = Some(process);
    }

    /// SIGKILL (nothing, if it has exited already) and forget it.
    pub(super) fn stop(&mut self) {
        let Some(mut m) = self.process.take() else {
            return;
        };
        m.kill(&self.world);
        match &m {
            MemberProcess::Sim { .. } => self.world.lock().remove_member(&self.key),
            MemberProcess::Real { cluster, .. } => {
                forget_real(&self.real_members, cluster, &self.key)
            }
            MemberProcess::Operator { .. } => {}
        }
        // Dropping it frees its ports before a new process binds them.
        drop(m);
    }

    /// Whether there is no process, or it has exited.
    pub(super) fn exited(&mut self) -> bool {
        let world = &self.world;
        self.process.as_mut().is_none_or(|m| m.exited(world))
    }

    /// How the process ended, once it has.
    pub(super) fn exit(&mut self) -> Option<Exit> {
        let world = &self.world;
        self.process.as_mut()?.exit(world)
    }

    pub(super) async fn terminate(&mut self) {
        if let Some(m) = self.process.as_mut() {
            m.terminate(&self.world).await;
        }
    }
}

impl Drop for MemberSlot {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use anyhow::anyhow;
    use tokio::time::Instant;

    use crate::model::{Faults, MemberSpec};
    use crate::node_http;
    use crate::node_resp::{self, RESP_PORT};
    use crate::real_node::PodLog;

    use super::*;

    /// A worker that fails (any `?`) drops its slot: a simulated member must not stay up in
    /// the model, nor keep its ports.
    #[tokio::test]
    async fn a_dropped_slot_stops_and_forgets_a_simulated_member() {
        let world = SharedWorld::new(crate::model::Settings::default(), 1);
        let ip = Ipv4Addr::new(127, 79, 0, 2);
        let key = "ns/demo-0";
        world.lock().start_member(
            "ns/demo",
            MemberSpec {
                key: key.into(),
                node_id: "0".into(),
                replicas_n: 2,
                volume: "vol-0".into(),
                disk_bytes: 1 << 30,
                faults: Faults::default(),
                addr: ip.to_string(),
                version: crate::model::MODELLED_VERSION.into(),
            },
        );
        let http = node_http::serve(world.clone(), key.into(), IpAddr::V4(ip))
            .await
            .unwrap();
        let resp = node_resp::serve(world.clone(), key.into(), IpAddr::V4(ip), None)
            .await
            .unwrap();
        let registry = RealMembers::default();
        let patch_gave_up = || Err::<(), _>(anyhow!("patching status of demo-0: gave up"));
        let failing_worker = async {
            let mut slot = MemberSlot::new(world.clone(), registry.clone(), key.into());
            slot.set(MemberProcess::Sim {
                key: key.into(),
                _http: http,
                _resp: resp,
            });
            assert!(world.lock().is_running(key));
            patch_gave_up()?;
            slot.stop();
            anyhow::Ok(())
        };
        assert!(failing_worker.await.is_err());
        assert!(!world.lock().is_running(key));
        assert!(
            world
                .lock()
                .clusters
                .values()
                .all(|c| !c.members.contains_key(key)),
            "the member is still in the model"
        );
        // Its servers stop: the pod IP is free for the next pod.
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokio::net::TcpStream::connect((ip, RESP_PORT))
            .await
            .is_ok()
        {
            assert!(Instant::now() < deadline, "{ip}:{RESP_PORT} still answers");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_dropped_slot_kills_a_real_member_and_takes_it_out_of_the_seeds() {
        let dir = std::env::temp_dir().join(format!("marekvs-sim-slot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = PodLog::new(&dir, "ns", "demo-0", "marekvs");
        let args = ["-c".to_string(), "echo started; exec sleep 30".to_string()];
        let node = RealNode::spawn(
            std::path::Path::new("/bin/sh"),
            &BTreeMap::new(),
            &args,
            &log,
            "start 1",
        )
        .unwrap();
        let registry = RealMembers::default();
        let ip = Ipv4Addr::new(127, 79, 0, 3);
        registry
            .lock()
            .unwrap()
            .entry("ns/demo".into())
            .or_default()
            .insert("ns/demo-0".into(), ip);
        let world = SharedWorld::new(crate::model::Settings::default(), 1);
        let mut slot = MemberSlot::new(world, registry.clone(), "ns/demo-0".into());
        slot.set(MemberProcess::Real {
            node: Box::new(node),
            cluster: "ns/demo".into(),
        });
        assert!(!slot.exited());
        // Stopping is what dropping does; it leaves the slot empty.
        slot.stop();
        assert!(slot.exited());
        assert!(registry.lock().unwrap()["ns/demo"].is_empty());
        drop(slot);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
