//! Jute encodings of the records shared by requests and replies (`Stat`, `ACL`, `Id`, string
//! vectors), with the smallest wire size of each so vector counts can be checked before allocating.

use crate::jute::{DecodeError, Reader, Writer};
use crate::records::{Acl, ClientInfo, Id, Stat};

/// Smallest `ACL`: perms plus two empty strings.
const MIN_ACL_LEN: usize = 4 + 4 + 4;
/// Smallest `ustring`: its length prefix.
const MIN_STRING_LEN: usize = 4;
/// Smallest `ClientInfo`: two empty strings.
const MIN_CLIENT_INFO_LEN: usize = 4 + 4;

pub(crate) fn read_stat(r: &mut Reader<'_>) -> Result<Stat, DecodeError> {
    Ok(Stat {
        czxid: r.read_i64()?,
        mzxid: r.read_i64()?,
        ctime: r.read_i64()?,
        mtime: r.read_i64()?,
        version: r.read_i32()?,
        cversion: r.read_i32()?,
        aversion: r.read_i32()?,
        ephemeral_owner: r.read_i64()?,
        data_length: r.read_i32()?,
        num_children: r.read_i32()?,
        pzxid: r.read_i64()?,
    })
}

pub(crate) fn write_stat(w: &mut Writer, s: &Stat) {
    w.write_i64(s.czxid);
    w.write_i64(s.mzxid);
    w.write_i64(s.ctime);
    w.write_i64(s.mtime);
    w.write_i32(s.version);
    w.write_i32(s.cversion);
    w.write_i32(s.aversion);
    w.write_i64(s.ephemeral_owner);
    w.write_i32(s.data_length);
    w.write_i32(s.num_children);
    w.write_i64(s.pzxid);
}

fn read_acl(r: &mut Reader<'_>) -> Result<Acl, DecodeError> {
    let perms = r.read_i32()?;
    let scheme = r.read_string()?;
    let id = r.read_string()?;
    Ok(Acl {
        perms,
        id: Id { scheme, id },
    })
}

fn write_acl(w: &mut Writer, a: &Acl) {
    w.write_i32(a.perms);
    w.write_string(&a.id.scheme);
    w.write_string(&a.id.id);
}

pub(crate) fn read_acl_vec(r: &mut Reader<'_>) -> Result<Vec<Acl>, DecodeError> {
    r.read_vec(MIN_ACL_LEN, read_acl)
}

pub(crate) fn write_acl_vec(w: &mut Writer, acl: &[Acl]) {
    w.write_vec(acl, write_acl);
}

pub(crate) fn read_string_vec(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    r.read_vec(MIN_STRING_LEN, Reader::read_string)
}

pub(crate) fn write_string_vec(w: &mut Writer, v: &[String]) {
    w.write_vec(v, |w, s| w.write_string(s));
}

pub(crate) fn read_client_info_vec(r: &mut Reader<'_>) -> Result<Vec<ClientInfo>, DecodeError> {
    r.read_vec(MIN_CLIENT_INFO_LEN, |r| {
        Ok(ClientInfo {
            auth_scheme: r.read_string()?,
            user: r.read_string()?,
        })
    })
}

pub(crate) fn write_client_info_vec(w: &mut Writer, v: &[ClientInfo]) {
    w.write_vec(v, |w, c| {
        w.write_string(&c.auth_scheme);
        w.write_string(&c.user);
    });
}

/// `MultiHeader {int type; boolean done; int err}`, which precedes every op and result of a
/// multi and, with `done` set, ends the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MultiHeader {
    pub(crate) op_type: i32,
    pub(crate) done: bool,
    pub(crate) err: i32,
}

impl MultiHeader {
    /// The terminator every ZooKeeper client and server writes: `{-1, true, -1}`.
    pub(crate) const END: MultiHeader = MultiHeader {
        op_type: -1,
        done: true,
        err: -1,
    };

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(MultiHeader {
            op_type: r.read_i32()?,
            done: r.read_bool()?,
            err: r.read_i32()?,
        })
    }

    pub(crate) fn write(self, w: &mut Writer) {
        w.write_i32(self.op_type);
        w.write_bool(self.done);
        w.write_i32(self.err);
    }

    /// The ops or results of a multi: one `item` (read from the header's op type) after each
    /// header, until a header with `done` set, whatever its type and err.
    pub(crate) fn read_items<T>(
        r: &mut Reader<'_>,
        mut item: impl FnMut(&mut Reader<'_>, i32) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let mut items = Vec::new();
        loop {
            let h = MultiHeader::read(r)?;
            if h.done {
                return Ok(items);
            }
            items.push(item(r, h.op_type)?);
        }
    }
}
