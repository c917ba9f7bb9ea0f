//! The payload of a log record: a batch of operations that become durable together.
//!
//! Encoding: a sequence of `[op u8][len u32 LE][body]`. Raft messages are protobuf-encoded;
//! index/term pairs are two little-endian u64s.

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState};

/// Record kind of a batch (the only kind so far; the byte leaves room for a format change).
pub(crate) const KIND_BATCH: u8 = 1;

const OP_ENTRY: u8 = 1;
const OP_HARD_STATE: u8 = 2;
const OP_CONF_STATE: u8 = 3;
const OP_COMPACT: u8 = 4;
const OP_RESET: u8 = 5;

/// One durable change to the log's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Writes the entry at its index, discarding any entries from that index on (raft's
    /// "a conflicting entry replaces the suffix"), so no separate truncation record is needed.
    Entry(Entry),
    /// Replaces the hard state.
    HardState(HardState),
    /// Replaces the conf state.
    ConfState(ConfState),
    /// Discards entries up to and including `index`, whose term is remembered for matching.
    Compact { index: u64, term: u64 },
    /// Discards every entry: a snapshot at (`index`, `term`) replaces the whole log.
    Reset { index: u64, term: u64 },
}

/// Accumulates encoded operations for one record.
#[derive(Debug, Default)]
pub(crate) struct BatchWriter {
    buf: Vec<u8>,
}

impl BatchWriter {
    /// Appends one operation.
    pub fn push(&mut self, op: &Op) -> Result<(), protobuf::ProtobufError> {
        let code = match op {
            Op::Entry(_) => OP_ENTRY,
            Op::HardState(_) => OP_HARD_STATE,
            Op::ConfState(_) => OP_CONF_STATE,
            Op::Compact { .. } => OP_COMPACT,
            Op::Reset { .. } => OP_RESET,
        };
        // Body length is patched in afterwards so protobuf encodes straight into the buffer.
        self.buf.push(code);
        self.buf.extend_from_slice(&[0; 4]);
        let start = self.buf.len();
        match op {
            Op::Entry(e) => e.write_to_vec(&mut self.buf)?,
            Op::HardState(hs) => hs.write_to_vec(&mut self.buf)?,
            Op::ConfState(cs) => cs.write_to_vec(&mut self.buf)?,
            Op::Compact { index, term } | Op::Reset { index, term } => {
                self.buf.extend_from_slice(&index.to_le_bytes());
                self.buf.extend_from_slice(&term.to_le_bytes());
            }
        }
        let len = (self.buf.len() - start) as u32;
        self.buf[start - 4..start].copy_from_slice(&len.to_le_bytes());
        Ok(())
    }

    /// The encoded payload.
    pub fn payload(&self) -> &[u8] {
        &self.buf
    }
}

/// Why a batch payload could not be decoded; `at` is the operation's byte inside the payload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchError {
    #[error("truncated operation header at payload byte {at}")]
    TruncatedHeader { at: usize },
    #[error("operation at payload byte {at} runs past the record")]
    PastRecord { at: usize },
    #[error("bad {what} at payload byte {at}: {source}")]
    Protobuf {
        what: &'static str,
        at: usize,
        source: protobuf::ProtobufError,
    },
    #[error("bad index/term at payload byte {at}")]
    IndexTerm { at: usize },
    #[error("unknown operation {code} at payload byte {at}")]
    UnknownOp { code: u8, at: usize },
}

/// Decodes a batch payload; the error says what was malformed and where inside the payload.
pub(crate) fn decode(payload: &[u8]) -> Result<Vec<Op>, BatchError> {
    let mut ops = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let head = payload
            .get(at..at + 5)
            .ok_or(BatchError::TruncatedHeader { at })?;
        let code = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let body = payload
            .get(at + 5..at + 5 + len)
            .ok_or(BatchError::PastRecord { at })?;
        let parse_err =
            |what: &'static str| move |source| BatchError::Protobuf { what, at, source };
        let op = match code {
            OP_ENTRY => Op::Entry(Entry::parse_from_bytes(body).map_err(parse_err("entry"))?),
            OP_HARD_STATE => {
                Op::HardState(HardState::parse_from_bytes(body).map_err(parse_err("hard state"))?)
            }
            OP_CONF_STATE => {
                Op::ConfState(ConfState::parse_from_bytes(body).map_err(parse_err("conf state"))?)
            }
            OP_COMPACT | OP_RESET => {
                let (index, term) = index_term(body).ok_or(BatchError::IndexTerm { at })?;
                if code == OP_COMPACT {
                    Op::Compact { index, term }
                } else {
                    Op::Reset { index, term }
                }
            }
            code => return Err(BatchError::UnknownOp { code, at }),
        };
        ops.push(op);
        at += 5 + len;
    }
    Ok(ops)
}

fn index_term(body: &[u8]) -> Option<(u64, u64)> {
    let index = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let term = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    (body.len() == 16).then_some((index, term))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_op() {
        let entry = Entry {
            index: 7,
            term: 3,
            data: b"payload".to_vec().into(),
            ..Default::default()
        };
        let hs = HardState {
            term: 3,
            vote: 2,
            commit: 6,
            ..Default::default()
        };
        let cs = ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        };
        let ops = vec![
            Op::Entry(entry),
            Op::HardState(hs),
            Op::ConfState(cs),
            Op::Compact { index: 5, term: 2 },
            Op::Reset { index: 9, term: 4 },
        ];
        let mut w = BatchWriter::default();
        for op in &ops {
            w.push(op).expect("encode");
        }
        assert_eq!(decode(w.payload()).expect("decode"), ops);
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        let mut w = BatchWriter::default();
        w.push(&Op::Compact { index: 1, term: 1 }).expect("encode");
        let good = w.payload().to_vec();
        for cut in 1..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut unknown = good.clone();
        unknown[0] = 99;
        assert_eq!(
            decode(&unknown).map_err(|e| e.to_string()),
            Err("unknown operation 99 at payload byte 0".to_string())
        );
    }
}
