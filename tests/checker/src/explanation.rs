//! What a failed check reports: the key, how far an order got, and why nothing fits next.

use std::fmt;

use crate::history::Operation;
use crate::model::Znode;

/// How many of the linearized operations a report prints before the dead end.
const PREFIX_SHOWN: usize = 8;

/// One operation that could have come next, and why it did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub operation: Operation,
    pub reason: String,
}

/// Proof that no order of a key's operations matches a single znode, as far as the search got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The znode path.
    pub key: String,
    /// How many operations on the key the search had to order (acknowledged writes, checked
    /// reads, writes of unknown outcome).
    pub searched: usize,
    /// The longest order found that respects real time and the model, first to last.
    pub longest_prefix: Vec<Operation>,
    /// The znode after that order.
    pub state: Znode,
    /// Every operation that could have come next, each with why it could not.
    pub next: Vec<Rejection>,
    /// The pending operation that returned first: it had to be placed before anything invoked
    /// after its return.
    pub deadline: Option<Operation>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "not linearizable on {}: no order of its {} operations fits one znode",
            self.key, self.searched
        )?;
        let skipped = self.longest_prefix.len().saturating_sub(PREFIX_SHOWN);
        writeln!(
            f,
            "  longest order that fits: {} operations{}",
            self.longest_prefix.len(),
            if skipped > 0 {
                format!(" (first {skipped} not shown)")
            } else {
                String::new()
            }
        )?;
        for op in self.longest_prefix.iter().skip(skipped) {
            writeln!(f, "    {op}")?;
        }
        writeln!(f, "  znode after it: {}", self.state)?;
        if let Some(deadline) = &self.deadline {
            writeln!(
                f,
                "  must be placed before anything invoked later: {deadline}"
            )?;
        }
        writeln!(f, "  none of the operations that may come next fits:")?;
        for rejection in &self.next {
            writeln!(f, "    {}: {}", rejection.operation, rejection.reason)?;
        }
        Ok(())
    }
}
