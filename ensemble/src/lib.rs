//! `baton-ensemble`: the runtime around `baton-machine` — client listener, Raft driver, disks, admin API.
