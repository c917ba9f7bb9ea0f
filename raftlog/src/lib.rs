//! Durable raft-rs `Storage`: a segmented write-ahead log and snapshot files.
