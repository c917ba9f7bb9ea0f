//! What clients saw: the operation history for the linearizability checker, the sequential
//! names acknowledged, and every lock grant.

use baton_checker::{Call, History, HistoryBuilder, HistoryError, Outcome};

use crate::time::Micros;

/// One operation as recorded, until the run ends and the history is built.
#[derive(Debug, Clone)]
struct Recorded {
    session: u64,
    key: String,
    call: Call,
    invoke: Micros,
    ret: Option<Micros>,
    outcome: Outcome,
}

/// A client believed it held a lock (or led an election) from `at`, with `token`.
#[derive(Debug, Clone)]
pub struct Grant {
    pub client: usize,
    pub dir: String,
    pub node: String,
    pub token: i64,
    pub at: Micros,
}

#[derive(Debug, Default)]
pub struct Recorder {
    ops: Vec<Recorded>,
    /// (actor, full path) of every acknowledged sequential create.
    pub sequential: Vec<(u64, String)>,
    pub grants: Vec<Grant>,
    /// Times a barrier client passed.
    pub barrier_passes: usize,
}

/// Names an operation until it completes.
pub type Ticket = usize;

impl Recorder {
    pub fn invoke(&mut self, session: u64, key: &str, call: Call, at: Micros) -> Ticket {
        self.ops.push(Recorded {
            session,
            key: key.to_owned(),
            call,
            invoke: at,
            ret: None,
            outcome: Outcome::Unknown,
        });
        self.ops.len() - 1
    }

    /// Records the answer; `Outcome::Unknown` leaves the operation open forever.
    pub fn complete(&mut self, ticket: Ticket, outcome: Outcome, at: Micros) {
        if let Some(op) = self.ops.get_mut(ticket) {
            if !matches!(outcome, Outcome::Unknown) {
                op.ret = Some(at);
            }
            op.outcome = outcome;
        }
    }

    /// Turns a read's call into an unchecked one (its `sync` did not succeed).
    pub fn uncheck(&mut self, ticket: Ticket) {
        if let Some(op) = self.ops.get_mut(ticket) {
            op.call = Call::GetData { checked: false };
        }
    }

    /// Mean latency in microseconds of answered operations, per kind of call.
    pub fn latency_summary(&self) -> String {
        let mut sums: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
        for op in &self.ops {
            let kind = match op.call {
                Call::Create { .. } => "create",
                Call::SetData { .. } => "setData",
                Call::Delete { .. } => "delete",
                Call::GetData { .. } => "sync+getData",
            };
            if let Some(ret) = op.ret {
                let e = sums.entry(kind).or_default();
                e.0 += ret - op.invoke;
                e.1 += 1;
            }
        }
        sums.iter()
            .map(|(k, (total, n))| format!("{k} {}x {} us", n, total / n.max(&1)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn operations(&self) -> usize {
        self.ops.len()
    }

    pub fn history(&self) -> Result<History, HistoryError> {
        let mut builder = HistoryBuilder::new();
        for op in &self.ops {
            builder.push(
                op.session,
                op.key.clone(),
                op.call.clone(),
                op.invoke,
                op.ret,
                op.outcome.clone(),
            );
        }
        builder.build()
    }
}
