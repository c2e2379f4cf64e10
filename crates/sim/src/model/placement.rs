//! Where keys live: the partition of a key, rendezvous (HRW) placement of partitions over the
//! candidates of a view, and node ids as `CLUSTER MYID` shows them.

use std::collections::BTreeMap;

use super::member::{NodePhase, PeerState};

pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Partition of a key: FNV-1a (64 bit) of the key's bytes, finished with the splitmix64 mixer
/// so the low bits are well spread, modulo the number of partitions.
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    (mix64(fnv(key)) % u64::from(partitions.max(1))) as u32
}

/// Rendezvous score of `node` for partition `pid`: a fixed, well-mixed 64-bit hash.
pub(crate) fn score(node: &str, pid: u32) -> u64 {
    mix64(fnv(node.as_bytes()) ^ u64::from(pid).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The placement candidates of a view: the members it sees Active or Leaving (a Leaving
/// member still owns its partitions; a Joining one owns nothing).
pub(crate) fn candidates(view: &BTreeMap<String, PeerState>) -> Vec<&str> {
    view.iter()
        .filter(|(_, s)| matches!(s.phase, NodePhase::Active | NodePhase::Leaving))
        .map(|(k, _)| k.as_str())
        .collect()
}

/// The owners of `pid` among `candidates`, highest score first: the top `n`, counting ties
/// with the last one in (those with fewer than `n` strictly higher scores).
pub(crate) fn owners_of<'a>(candidates: &[&'a str], n: usize, pid: u32) -> Vec<&'a str> {
    let mut scored: Vec<(u64, &'a str)> = candidates.iter().map(|c| (score(c, pid), *c)).collect();
    scored.sort_by(|a, b| b.cmp(a));
    let mut owners = Vec::new();
    let mut higher = 0;
    for (i, (s, c)) in scored.iter().enumerate() {
        if i > 0 && scored[i - 1].0 != *s {
            higher = i;
        }
        if higher >= n {
            break;
        }
        owners.push(*c);
    }
    owners
}

/// The owners of `pid` in `view`, in the order a read asks them: the primary (the first
/// Active owner; a draining primary hands that role on) first, then the others by score.
pub(crate) fn read_order(view: &BTreeMap<String, PeerState>, n: usize, pid: u32) -> Vec<&str> {
    let mut owners = owners_of(&candidates(view), n, pid);
    if let Some(h1) = owners
        .iter()
        .position(|o| view.get(*o).is_some_and(|s| s.phase == NodePhase::Active))
    {
        let primary = owners.remove(h1);
        owners.insert(0, primary);
    }
    owners
}

/// `CLUSTER MYID` of a node: its numeric id as 40 hex digits, stable across restarts; a node
/// id that is not a number gets a hash of it instead.
pub fn node_myid(node_id: &str) -> String {
    match node_id.parse::<u64>() {
        Ok(n) => format!("{n:040x}"),
        Err(_) => run_id("", node_id),
    }
}

/// A 40-hex id fixed for a (cluster, name) pair (for names that are no numeric node id).
pub fn run_id(cluster: &str, name: &str) -> String {
    let mut bytes = cluster.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(name.as_bytes());
    let h = fnv(&bytes);
    let words = [1u64, 2, 3].map(|i| mix64(h ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    let mut id = format!("{:016x}{:016x}{:016x}", words[0], words[1], words[2]);
    id.truncate(40);
    id
}
