//! Shared harness for end-to-end tests: start real `baton-ensemble` processes on loopback.
