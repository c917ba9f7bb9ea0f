//! What clients recorded: one `Operation` per request, with when it was invoked, when (if ever)
//! its answer arrived, and what the answer said.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

/// Index of an operation in its `History`, stable for reports.
pub type OpId = usize;

/// A request one client sent about one znode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call {
    /// `create(path, data)` of a persistent, non-sequential node.
    Create { data: Vec<u8> },
    /// `setData(path, data, expected_version)`; -1 matches any version.
    SetData {
        data: Vec<u8>,
        expected_version: i32,
    },
    /// `delete(path, expected_version)`; -1 matches any version.
    Delete { expected_version: i32 },
    /// `getData(path)`; `checked` says whether it must be linearizable (done after `sync`, or
    /// answered by the leader). Unchecked reads are kept in the history but not searched.
    GetData { checked: bool },
}

impl Call {
    /// A create with `data`.
    pub fn create(data: impl Into<Vec<u8>>) -> Call {
        Call::Create { data: data.into() }
    }

    /// A setData with `data` and `expected_version` (-1: any).
    pub fn set_data(data: impl Into<Vec<u8>>, expected_version: i32) -> Call {
        Call::SetData {
            data: data.into(),
            expected_version,
        }
    }

    /// A delete with `expected_version` (-1: any).
    pub fn delete(expected_version: i32) -> Call {
        Call::Delete { expected_version }
    }

    /// A read that must be linearizable.
    pub fn get_data() -> Call {
        Call::GetData { checked: true }
    }

    /// Whether the call can change the znode.
    pub fn is_write(&self) -> bool {
        !matches!(self, Call::GetData { .. })
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Create { data } => write!(f, "create({})", show(data)),
            Call::SetData {
                data,
                expected_version,
            } => write!(
                f,
                "setData({}, {})",
                show(data),
                expected(*expected_version)
            ),
            Call::Delete { expected_version } => {
                write!(f, "delete({})", expected(*expected_version))
            }
            Call::GetData { checked: true } => write!(f, "getData"),
            Call::GetData { checked: false } => write!(f, "getData(unchecked)"),
        }
    }
}

/// What a successful answer carried.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reply {
    /// create or delete succeeded.
    Done,
    /// setData succeeded; the znode's new version.
    Version(i32),
    /// getData found the znode with this data and version.
    Data { data: Vec<u8>, version: i32 },
    /// getData answered NoNode: the znode was absent.
    Absent,
}

/// Why a request definitely did not take effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    NodeExists,
    NoNode,
    BadVersion,
    /// Any other error the server answered (the request was refused, not lost).
    Other,
}

/// How a request ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The server answered success.
    Ok(Reply),
    /// The server answered an error: the request had no effect. A named error (NodeExists,
    /// NoNode, BadVersion) must also fit the znode at some point of the request's interval.
    Failed(Failure),
    /// No answer (connection loss, timeout): it may have taken effect at any time after its
    /// invocation, or never.
    Unknown,
}

impl Outcome {
    /// A getData answer with `data` at `version`.
    pub fn read(data: impl Into<Vec<u8>>, version: i32) -> Outcome {
        Outcome::Ok(Reply::Data {
            data: data.into(),
            version,
        })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(Reply::Done) => write!(f, "ok"),
            Outcome::Ok(Reply::Version(version)) => write!(f, "ok v{version}"),
            Outcome::Ok(Reply::Data { data, version }) => write!(f, "{} v{version}", show(data)),
            Outcome::Ok(Reply::Absent) => write!(f, "NoNode"),
            Outcome::Failed(failure) => write!(f, "{failure:?}"),
            Outcome::Unknown => write!(f, "unknown"),
        }
    }
}

/// One recorded request. Times are in any monotonic unit shared by the whole history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub id: OpId,
    /// The client session (or any sequential actor) that sent it.
    pub session: u64,
    /// The znode path: operations on different paths are independent.
    pub key: String,
    pub call: Call,
    pub invoke: u64,
    /// When the answer arrived; `None` if it never did.
    pub ret: Option<u64>,
    pub outcome: Outcome,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} session {} {} {} -> {} [{}, ",
            self.id, self.session, self.key, self.call, self.outcome, self.invoke
        )?;
        match self.ret {
            Some(ret) => write!(f, "{ret}]"),
            None => write!(f, "never]"),
        }
    }
}

/// Why a recorded history cannot be checked.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HistoryError {
    #[error("operation #{id} returned at {ret} before it was invoked at {invoke}")]
    ReturnBeforeInvoke { id: OpId, invoke: u64, ret: u64 },
    #[error("operation #{id} has an answer ({outcome}) but no return time")]
    AnswerWithoutReturn { id: OpId, outcome: String },
    #[error("operation #{id}: {call} cannot answer {outcome}")]
    ReplyDoesNotFitCall {
        id: OpId,
        call: String,
        outcome: String,
    },
}

/// A validated history, with its operations grouped by znode path.
#[derive(Debug, Clone, Default)]
pub struct History {
    operations: Vec<Operation>,
    by_key: BTreeMap<String, Vec<OpId>>,
}

impl History {
    /// Every operation, indexed by `OpId`.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The operation `id`, if the history has it.
    pub fn operation(&self, id: OpId) -> Option<&Operation> {
        self.operations.get(id)
    }

    /// The paths touched, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }

    /// The operations on `key`, in recording order.
    pub fn on_key<'a>(&'a self, key: &str) -> impl Iterator<Item = &'a Operation> + 'a {
        self.by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| self.operations.get(*id))
    }
}

/// Collects operations, then validates them into a `History`.
#[derive(Debug, Clone, Default)]
pub struct HistoryBuilder {
    operations: Vec<Operation>,
}

impl HistoryBuilder {
    /// An empty history.
    pub fn new() -> HistoryBuilder {
        HistoryBuilder::default()
    }

    /// Records one operation and returns its id.
    pub fn push(
        &mut self,
        session: u64,
        key: impl Into<String>,
        call: Call,
        invoke: u64,
        ret: Option<u64>,
        outcome: Outcome,
    ) -> OpId {
        let id = self.operations.len();
        self.operations.push(Operation {
            id,
            session,
            key: key.into(),
            call,
            invoke,
            ret,
            outcome,
        });
        id
    }

    /// Checks every operation is well formed (answers fit their calls, returns follow
    /// invocations) and groups them by path. A read's NoNode becomes the observation `Absent`.
    pub fn build(self) -> Result<History, HistoryError> {
        let mut history = History::default();
        for mut op in self.operations {
            if let (Call::GetData { .. }, Outcome::Failed(Failure::NoNode)) =
                (&op.call, &op.outcome)
            {
                op.outcome = Outcome::Ok(Reply::Absent);
            }
            validate(&op)?;
            history
                .by_key
                .entry(op.key.clone())
                .or_default()
                .push(op.id);
            history.operations.push(op);
        }
        Ok(history)
    }
}

fn validate(op: &Operation) -> Result<(), HistoryError> {
    match (op.ret, &op.outcome) {
        (Some(ret), _) if ret < op.invoke => {
            return Err(HistoryError::ReturnBeforeInvoke {
                id: op.id,
                invoke: op.invoke,
                ret,
            });
        }
        (None, Outcome::Ok(_) | Outcome::Failed(_)) => {
            return Err(HistoryError::AnswerWithoutReturn {
                id: op.id,
                outcome: op.outcome.to_string(),
            });
        }
        _ => {}
    }
    let fits = match (&op.call, &op.outcome) {
        (_, Outcome::Failed(_) | Outcome::Unknown) => true,
        (Call::Create { .. } | Call::Delete { .. }, Outcome::Ok(reply)) => *reply == Reply::Done,
        (Call::SetData { .. }, Outcome::Ok(reply)) => matches!(reply, Reply::Version(_)),
        (Call::GetData { .. }, Outcome::Ok(reply)) => {
            matches!(reply, Reply::Data { .. } | Reply::Absent)
        }
    };
    if fits {
        Ok(())
    } else {
        Err(HistoryError::ReplyDoesNotFitCall {
            id: op.id,
            call: op.call.to_string(),
            outcome: op.outcome.to_string(),
        })
    }
}

/// An expected version for humans: -1 matches any.
fn expected(version: i32) -> String {
    if version == -1 {
        "any version".to_owned()
    } else {
        format!("if v{version}")
    }
}

/// Znode data for humans: UTF-8 when it is, bytes otherwise.
pub(crate) fn show(data: &[u8]) -> String {
    match std::str::from_utf8(data) {
        Ok(text) => format!("{text:?}"),
        Err(_) => format!("{data:?}"),
    }
}
