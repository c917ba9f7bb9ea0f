//! Loopback ports for the children: the familiar ones (2181 for ZooKeeper clients, 4041 for
//! the first pod…) when they are free, any free one otherwise.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, Result};
use tokio::net::TcpListener;

/// Hands out distinct free loopback addresses. Every address stays bound until
/// [`PortPicker::release`], so no two children are given the same port; between release and
/// a child's bind another program could take one, which the child then reports in its log.
#[derive(Debug, Default)]
pub struct PortPicker {
    held: Vec<TcpListener>,
    /// Take any free port rather than the familiar ones (tests, several playgrounds at once).
    any: bool,
}

impl PortPicker {
    /// A picker that tries the preferred ports first unless `any` is set.
    pub fn new(any: bool) -> Self {
        Self {
            held: Vec::new(),
            any,
        }
    }

    /// `127.0.0.1:preferred` if it is free (and `any` is off), else a free port chosen by the OS.
    pub async fn pick(&mut self, preferred: u16) -> Result<SocketAddr> {
        // tokio's listener sets SO_REUSEADDR as the children's listeners do, so a port that
        // only has connections in TIME_WAIT from a previous run still counts as free.
        let wanted = if self.any { 0 } else { preferred };
        let listener = match TcpListener::bind((Ipv4Addr::LOCALHOST, wanted)).await {
            Ok(listener) => listener,
            Err(_) => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .await
                .context("find a free port on 127.0.0.1")?,
        };
        let addr = listener
            .local_addr()
            .context("read a bound port's address")?;
        self.held.push(listener);
        Ok(addr)
    }

    /// Frees every picked port so the children can bind them.
    pub fn release(self) {
        drop(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn falls_back_when_the_preferred_port_is_taken() {
        let mut picker = PortPicker::new(false);
        let first = picker.pick(0).await.unwrap();
        // The first address is still held, so asking for it again must give another port.
        let second = picker.pick(first.port()).await.unwrap();
        assert_ne!(first, second);
        assert!(second.ip().is_loopback());
        picker.release();
        TcpListener::bind(first).await.unwrap();
    }
}
