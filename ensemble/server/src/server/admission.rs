//! Who may open a client connection: at most `max_connections` in all and at most
//! `max_per_ip` from one address (ZooKeeper's `maxClientCnxns`), so one pod opening thousands
//! of idle connections cannot keep everyone else out. Both listeners (plain and TLS) share
//! one `Admission`; a connection holds its place until it closes, handshake included.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a connection was closed at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this address already has {0} client connections (--max-client-connections-per-ip)")]
    PerIp(usize),
    #[error("the member already has {0} client connections (--max-client-connections)")]
    Total(usize),
}

impl Refusal {
    /// The `reason` label of `baton_client_connections_refused_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::PerIp(_) => "per_ip_limit",
            Refusal::Total(_) => "connection_limit",
        }
    }
}

/// The connection counts, in all and per client address.
#[derive(Debug)]
pub struct Admission {
    total: Arc<Semaphore>,
    max_total: usize,
    /// 0: no per-address limit (as ZooKeeper's `maxClientCnxns=0`).
    max_per_ip: usize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    ip: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Admission> {
        Arc::new(Admission {
            total: Arc::new(Semaphore::new(max_total)),
            max_total,
            max_per_ip,
            per_ip: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a place for a connection from `ip`, or says which limit it would pass.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refusal> {
        // An IPv4 client of a dual-stack listener shows up as ::ffff:a.b.c.d: the same address.
        let ip = ip.to_canonical();
        let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let count = per_ip.entry(ip).or_default();
        if self.max_per_ip != 0 && *count >= self.max_per_ip {
            return Err(Refusal::PerIp(self.max_per_ip));
        }
        let Ok(permit) = self.total.clone().try_acquire_owned() else {
            if *count == 0 {
                per_ip.remove(&ip);
            }
            return Err(Refusal::Total(self.max_total));
        };
        *count += 1;
        Ok(Admitted {
            admission: self.clone(),
            ip,
            _permit: permit,
        })
    }

    /// Connections open from `ip` now.
    pub fn count(&self, ip: IpAddr) -> usize {
        let per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        per_ip.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut per_ip = self
            .admission
            .per_ip
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = per_ip.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                // Forget the address: the map holds only addresses with open connections.
                per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn caps_each_address_and_the_total() {
        let a = Admission::new(5, 2);
        let first = a.admit(ip("10.0.0.1")).unwrap();
        let _second = a.admit(ip("::ffff:10.0.0.1")).unwrap();
        assert_eq!(a.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerIp(2));
        let _others: Vec<_> = (2..5)
            .map(|i| a.admit(ip(&format!("10.0.0.{i}"))).unwrap())
            .collect();
        assert_eq!(a.admit(ip("10.0.0.9")).unwrap_err(), Refusal::Total(5));
        assert_eq!(a.count(ip("10.0.0.9")), 0);
        drop(first);
        assert_eq!(a.count(ip("10.0.0.1")), 1);
        assert!(a.admit(ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn zero_means_no_per_address_limit() {
        let a = Admission::new(100, 0);
        let held: Vec<_> = (0..100).map(|_| a.admit(ip("10.0.0.1")).unwrap()).collect();
        assert_eq!(a.count(ip("10.0.0.1")), 100);
        drop(held);
        assert_eq!(a.count(ip("10.0.0.1")), 0);
    }
}
