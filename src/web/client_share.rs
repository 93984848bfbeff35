//! Connections per client: one host holding idle or half-open connections can take at most a
//! share of the server's, so a scraper on another host always finds one free. Clients are
//! counted as auth counts them (`auth::client_key`: an IPv4 address, an IPv6 /64).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per client key; an entry goes when its last connection closes.
#[derive(Debug, Default)]
pub(crate) struct ClientShares {
    open: Mutex<HashMap<IpAddr, usize>>,
    max_per_client: usize,
}

/// One connection's place in its client's share, given back on drop.
#[derive(Debug)]
pub(crate) struct ShareSlot {
    shares: Arc<ClientShares>,
    key: IpAddr,
}

impl ClientShares {
    pub fn new(max_per_client: usize) -> Arc<ClientShares> {
        Arc::new(ClientShares {
            open: Mutex::default(),
            max_per_client,
        })
    }

    /// A slot for a connection from `ip`, or `None` when its client holds its whole share.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<ShareSlot> {
        let key = super::auth::client_key(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(key).or_default();
        if *count >= self.max_per_client {
            return None;
        }
        *count += 1;
        Some(ShareSlot {
            shares: self.clone(),
            key,
        })
    }
}

impl Drop for ShareSlot {
    fn drop(&mut self) {
        let mut open = self.shares.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_share() {
        let shares = ClientShares::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = shares.take(a).unwrap();
        let _second = shares.take(a).unwrap();
        assert!(shares.take(a).is_none(), "a third from the same host");
        assert!(shares.take(b).is_some(), "another host is not affected");
        drop(first);
        assert!(
            shares.take(a).is_some(),
            "a closed connection frees its slot"
        );
        // One IPv6 /64 is one client.
        let _x = shares.take("2001:db8::1".parse().unwrap()).unwrap();
        let _y = shares.take("2001:db8::2".parse().unwrap()).unwrap();
        assert!(shares.take("2001:db8::ffff".parse().unwrap()).is_none());
        assert!(shares.take("2001:db8:0:1::1".parse().unwrap()).is_some());
    }
}
