//! Transport tests over real loopback TCP.
