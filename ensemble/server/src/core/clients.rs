//! The client connections attached to this member, found by connection id or by session.
//!
//! A session is attached to at most one connection here: its newest. A connection may outlive
//! its attachment (the session closed, or moved to a newer connection) until its reader reports
//! it gone, so the table keeps both directions itself rather than trusting `session_id`.

use std::collections::BTreeMap;

use super::Core;
use super::local_conn::LocalConn;
use super::messages::ConnId;

#[derive(Debug, Default)]
pub(super) struct ClientTable {
    conns: BTreeMap<ConnId, LocalConn>,
    /// Session → the connection it is attached to; always a connection in `conns` whose
    /// `session_id` names that session.
    by_session: BTreeMap<i64, ConnId>,
}

impl ClientTable {
    /// Adds a connection that has no session attached yet.
    pub fn insert(&mut self, id: ConnId, conn: LocalConn) {
        self.conns.insert(id, conn);
    }

    pub fn get(&self, id: ConnId) -> Option<&LocalConn> {
        self.conns.get(&id)
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut LocalConn> {
        self.conns.get_mut(&id)
    }

    pub fn contains(&self, id: ConnId) -> bool {
        self.conns.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn values(&self) -> impl Iterator<Item = &LocalConn> {
        self.conns.values()
    }

    /// The connections for which `pred` holds, in id order.
    pub fn ids_where(&self, mut pred: impl FnMut(&LocalConn) -> bool) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| pred(c))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The connection `session_id` is attached to.
    pub fn conn_of(&self, session_id: i64) -> Option<ConnId> {
        self.by_session.get(&session_id).copied()
    }

    pub fn of_session(&self, session_id: i64) -> Option<&LocalConn> {
        self.conns.get(self.by_session.get(&session_id)?)
    }

    pub fn of_session_mut(&mut self, session_id: i64) -> Option<&mut LocalConn> {
        self.conns.get_mut(self.by_session.get(&session_id)?)
    }

    /// Attaches `session_id` to connection `id`; `None` (nothing changed) when the connection
    /// is gone. The session must not be attached elsewhere: detach it first.
    pub fn attach(&mut self, session_id: i64, id: ConnId) -> Option<&mut LocalConn> {
        let conn = self.conns.get_mut(&id)?;
        conn.session_id = Some(session_id);
        self.by_session.insert(session_id, id);
        Some(conn)
    }

    /// Detaches `session_id` from its connection, which stays in the table until it is
    /// removed; returns that connection's id.
    pub fn detach(&mut self, session_id: i64) -> Option<ConnId> {
        self.by_session.remove(&session_id)
    }

    /// Detaches `session_id` and removes the connection it was attached to (if still here).
    pub fn take_session(&mut self, session_id: i64) -> Option<LocalConn> {
        let id = self.by_session.remove(&session_id)?;
        self.conns.remove(&id)
    }

    /// Removes a connection; when its session was attached to it, the session is detached and
    /// returned with it.
    pub fn remove(&mut self, id: ConnId) -> Option<(LocalConn, Option<i64>)> {
        let conn = self.conns.remove(&id)?;
        let detached = conn
            .session_id
            .filter(|s| self.by_session.get(s) == Some(&id));
        if let Some(session_id) = detached {
            self.by_session.remove(&session_id);
        }
        Some((conn, detached))
    }
}

impl Core {
    /// Closes a connection now and forgets it (its reader will report `Disconnected`, which
    /// then finds nothing to do).
    pub(super) fn drop_connection(&mut self, conn_id: ConnId) {
        if let Some(conn) = self.clients.get(conn_id) {
            conn.close();
        }
        self.on_disconnected(conn_id);
    }

    pub(super) fn on_disconnected(&mut self, conn_id: ConnId) {
        if let Some((_, Some(session_id))) = self.clients.remove(conn_id) {
            // The session lives on until it expires; its watches belong to the connection
            // (clients re-send them with setWatches when they reconnect).
            self.watches.remove_session(session_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::core::messages::{OutboundRx, unlimited_outbound_queue};

    fn conn() -> (LocalConn, OutboundRx) {
        let (tx, rx) = unlimited_outbound_queue();
        let peer: SocketAddr = "127.0.0.1:5000".parse().expect("address");
        (LocalConn::new(peer, tx), rx)
    }

    #[test]
    fn a_connection_is_found_by_id_then_by_its_session_once_attached() {
        let mut t = ClientTable::default();
        t.insert(1, conn().0);
        assert!(t.contains(1));
        assert_eq!(t.conn_of(7), None);
        assert!(t.attach(7, 1).is_some());
        assert_eq!(t.conn_of(7), Some(1));
        assert_eq!(t.of_session(7).and_then(|c| c.session_id), Some(7));
        assert!(t.attach(8, 2).is_none(), "no such connection");
        assert_eq!(t.conn_of(8), None);
    }

    #[test]
    fn removing_an_attached_connection_detaches_its_session() {
        let mut t = ClientTable::default();
        t.insert(1, conn().0);
        t.attach(7, 1);
        let (_, detached) = t.remove(1).expect("present");
        assert_eq!(detached, Some(7));
        assert_eq!(t.conn_of(7), None);
        assert!(t.remove(1).is_none());
    }

    #[test]
    fn an_old_connection_of_a_moved_session_leaves_the_new_attachment_alone() {
        let mut t = ClientTable::default();
        t.insert(1, conn().0);
        t.attach(7, 1);
        // The session detaches from connection 1 (closed on this member) but connection 1
        // lingers until its reader reports it gone; meanwhile the session attaches to 2.
        assert_eq!(t.detach(7), Some(1));
        t.insert(2, conn().0);
        t.attach(7, 2);
        let (old, detached) = t.remove(1).expect("present");
        assert_eq!(old.session_id, Some(7));
        assert_eq!(detached, None);
        assert_eq!(t.conn_of(7), Some(2));
    }

    #[test]
    fn taking_a_session_removes_its_connection() {
        let mut t = ClientTable::default();
        t.insert(1, conn().0);
        t.attach(7, 1);
        assert!(t.take_session(7).is_some());
        assert!(!t.contains(1));
        assert_eq!(t.len(), 0);
        assert!(t.take_session(7).is_none());
    }

    #[test]
    fn ids_where_filters_in_id_order() {
        let mut t = ClientTable::default();
        for id in [3, 1, 2] {
            t.insert(id, conn().0);
        }
        t.attach(9, 2);
        assert_eq!(t.ids_where(|_| true), vec![1, 2, 3]);
        assert_eq!(t.ids_where(|c| c.session_id.is_some()), vec![2]);
    }
}
