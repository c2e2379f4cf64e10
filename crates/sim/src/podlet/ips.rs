//! Loopback pod IPs: each node's `spec.podCIDR` parsed, and addresses handed out round robin.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::Podlet;

/// Pool for nodes without a `spec.podCIDR`.
const FALLBACK_POOL: (Ipv4Addr, u8) = (Ipv4Addr::new(127, 240, 0, 0), 16);

impl Podlet {
    pub(super) fn allocate_ip(
        &self,
        node: &Node,
        wanted: Option<Ipv4Addr>,
    ) -> anyhow::Result<Ipv4Addr> {
        let (base, prefix) = match node.spec.as_ref().and_then(|s| s.pod_cidr.as_deref()) {
            Some(cidr) => parse_cidr(cidr)?,
            None => FALLBACK_POOL,
        };
        if !base.is_loopback() {
            bail!(
                "node {} has podCIDR {base}/{prefix}: the harness only assigns loopback pod IPs",
                node.name_any()
            );
        }
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allocate(base, prefix, wanted)
    }

    pub(super) fn free_ip(&self, ip: Ipv4Addr) {
        self.ips.lock().unwrap_or_else(|e| e.into_inner()).free(ip);
    }
}

fn parse_cidr(cidr: &str) -> anyhow::Result<(Ipv4Addr, u8)> {
    let (ip, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| anyhow!("bad CIDR {cidr}"))?;
    let prefix: u8 = prefix.parse()?;
    if !(8..=30).contains(&prefix) {
        bail!("CIDR {cidr}: prefix must be between /8 and /30");
    }
    Ok((ip.parse()?, prefix))
}

/// The pod IPs handed out, over every node's range.
#[derive(Default)]
pub(super) struct IpPool {
    used: BTreeSet<Ipv4Addr>,
    /// Per range (by its first address), the offset of the last address handed out.
    last: std::collections::HashMap<u32, u32>,
}

impl IpPool {
    /// `wanted` if it is free, else the next free address of `base/prefix` after the last one
    /// handed out there: round robin, as a kubelet's host-local IPAM does, so a freed address
    /// is reused only after the rest of the range. Real members keep dialing a departed peer's
    /// address for a while; a new pod given it at once (another cluster's member, with the
    /// same node id) was taken for that peer, and its cluster never formed.
    fn allocate(
        &mut self,
        base: Ipv4Addr,
        prefix: u8,
        wanted: Option<Ipv4Addr>,
    ) -> anyhow::Result<Ipv4Addr> {
        if let Some(ip) = wanted.filter(|ip| ip.is_loopback() && !self.used.contains(ip)) {
            self.used.insert(ip);
            return Ok(ip);
        }
        let size = 1u32 << (32 - u32::from(prefix));
        let start = u32::from(base);
        // Not the network address, .1 or the broadcast address of the range.
        let first = 2u32;
        let span = size.saturating_sub(3).max(1);
        let cursor = self.last.entry(start).or_insert(first + span - 1);
        for step in 1..=span {
            let off = first + (*cursor - first + step) % span;
            let ip = Ipv4Addr::from(start + off);
            if self.used.insert(ip) {
                *cursor = off;
                return Ok(ip);
            }
        }
        bail!("no free pod IP in {base}/{prefix}")
    }

    fn free(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_pod_ip_is_reused_only_after_the_rest_of_the_range() {
        let mut pool = IpPool::default();
        let base = Ipv4Addr::new(127, 2, 0, 0);
        let a = pool.allocate(base, 29, None).unwrap();
        let b = pool.allocate(base, 29, None).unwrap();
        assert_eq!(
            (a, b),
            (Ipv4Addr::new(127, 2, 0, 2), Ipv4Addr::new(127, 2, 0, 3))
        );
        pool.free(a);
        // .2 is free again, but .4, .5 and .6 come first; then .2; .3 is still in use.
        let next: Vec<Ipv4Addr> = (0..4)
            .map(|_| pool.allocate(base, 29, None).unwrap())
            .collect();
        assert_eq!(
            next,
            [4, 5, 6, 2].map(|d| Ipv4Addr::new(127, 2, 0, d)),
            "round robin over .2-.6"
        );
        assert!(pool.allocate(base, 29, None).is_err(), "the range is full");
        // A wanted free address is given as asked.
        pool.free(Ipv4Addr::new(127, 2, 0, 5));
        let wanted = Ipv4Addr::new(127, 2, 0, 5);
        assert_eq!(pool.allocate(base, 29, Some(wanted)).unwrap(), wanted);
    }

    #[test]
    fn cidrs_parse_and_refuse_silly_prefixes() {
        assert_eq!(
            parse_cidr("127.1.0.0/24").unwrap(),
            (Ipv4Addr::new(127, 1, 0, 0), 24)
        );
        assert!(parse_cidr("127.1.0.0/32").is_err());
        assert!(parse_cidr("127.1.0.0").is_err());
    }
}
