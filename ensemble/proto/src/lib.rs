//! Apache ZooKeeper's client wire protocol: jute records inside 4-byte length-prefixed frames.
//!
//! Both directions are here: the server decodes requests and encodes replies; our own test,
//! simulation and benchmark clients do the reverse. Nothing in this crate panics on any input.

pub mod codec;
pub mod error;
pub mod frame;
pub mod jute;
pub mod opcode;
pub mod records;
pub mod request;
pub mod response;

pub use error::ErrorCode;
pub use jute::{DecodeError, Reader, Writer};
pub use opcode::{OpCode, xid};
pub use records::*;
pub use request::*;
pub use response::*;
