//! Length-prefixed framing with a size limit (`jute.maxbuffer`).

/// Default largest frame payload accepted, like ZooKeeper's `jute.maxbuffer` (1 MiB - 1 byte... see docs).
pub const DEFAULT_MAX_FRAME: usize = 1024 * 1024;
