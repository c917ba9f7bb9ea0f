//! Throughput of the tree and the cost of a snapshot at scale, for comparing designs:
//! `cargo run --release -p baton-machine --example tree_bench [ZNODES]` (default 1,000,000,
//! in one directory, as the bench's `populate` makes them).
//! Prints create/get/setData rates, RSS, and how long a snapshot takes.

use std::time::{Duration, Instant};

use baton_machine::{Command, CommandKind, StateMachine};
use baton_proto::{CreateRequest, OpCode, Request, SetDataRequest, open_acl_unsafe};

const SESSION: i64 = 1;

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

struct Driver {
    sm: StateMachine,
    zxid: i64,
}

impl Driver {
    fn apply(&mut self, kind: CommandKind) {
        self.zxid += 1;
        let cmd = Command {
            session_id: SESSION,
            xid: self.zxid as i32,
            time_ms: 1_700_000_000_000 + self.zxid,
            kind,
        };
        let applied = self.sm.apply(self.zxid, &cmd);
        assert_eq!(applied.err, 0, "entry {} failed", self.zxid);
    }

    fn write(&mut self, request: Request) {
        self.apply(CommandKind::Write {
            auth: vec![],
            request,
        });
    }

    fn create(&mut self, path: &str, data: &[u8]) {
        self.write(Request::Create {
            op: OpCode::Create2,
            req: CreateRequest {
                path: path.to_owned(),
                data: Some(data.to_vec()),
                acl: open_acl_unsafe(),
                flags: 0,
                ttl: None,
            },
        });
    }

    fn set(&mut self, path: &str, data: &[u8]) {
        self.write(Request::SetData(SetDataRequest {
            path: path.to_owned(),
            data: Some(data.to_vec()),
            version: -1,
        }));
    }
}

fn rate(n: usize, elapsed: Duration) -> String {
    format!("{:.0}/s", n as f64 / elapsed.as_secs_f64())
}

fn main() {
    let znodes: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let rss_before = rss_mib();
    let mut d = Driver {
        sm: StateMachine::new(),
        zxid: 0,
    };
    d.apply(CommandKind::CreateSession {
        timeout_ms: 30_000,
        passwd: vec![0; 16],
    });
    d.create("/bench", b"");
    let data = [7u8; 16];
    let paths: Vec<String> = (0..znodes).map(|i| format!("/bench/n{i}")).collect();
    let started = Instant::now();
    for p in &paths {
        d.create(p, &data);
    }
    let create = started.elapsed();
    let rss = rss_mib() - rss_before;

    // A fixed pseudo-random order, so gets and sets miss the cache as a real load would.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let order: Vec<usize> = (0..1_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % znodes as u64) as usize
        })
        .collect();
    let started = Instant::now();
    let mut found = 0usize;
    for &i in &order {
        found += d.sm.tree().get(&paths[i]).map_or(0, |n| n.data_len());
    }
    let get = started.elapsed();
    assert!(found > 0);
    let sets = 200_000;
    let started = Instant::now();
    for &i in &order[..sets] {
        d.set(&paths[i], &data);
    }
    let set = started.elapsed();

    let started = Instant::now();
    let bytes = d.sm.snapshot();
    let snapshot = started.elapsed();
    let started = Instant::now();
    let crc = crc32fast::hash(&bytes);
    let crc_time = started.elapsed();

    println!("znodes            {znodes}");
    println!("create (apply)    {}", rate(znodes, create));
    println!("get (tree)        {}", rate(order.len(), get));
    println!("setData (apply)   {}", rate(sets, set));
    println!(
        "tree RSS          {rss:.0} MiB ({:.0} B/znode)",
        rss * (1 << 20) as f64 / znodes as f64
    );
    println!(
        "snapshot()        {:.1} ms, {} MiB",
        snapshot.as_secs_f64() * 1e3,
        bytes.len() >> 20
    );
    println!(
        "  crc32 of it     {:.1} ms ({crc:08x})",
        crc_time.as_secs_f64() * 1e3
    );
    after_change(&mut d, &paths, &data);
}

/// The snapshot as the core now takes it: an O(1) copy, serialized on another thread while
/// writes go on; and what the sharing costs the writes made meanwhile.
fn after_change(d: &mut Driver, paths: &[String], data: &[u8]) {
    let started = Instant::now();
    let frozen = d.sm.freeze();
    let freeze = started.elapsed();
    let writer = std::thread::spawn(move || {
        let started = Instant::now();
        let bytes = frozen.to_bytes();
        (started.elapsed(), crc32fast::hash(&bytes))
    });
    let sets = 200_000;
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    for (n, i) in (0..sets).map(|n| (n, (n * 7919) % paths.len())) {
        let one = Instant::now();
        d.set(&paths[i], data);
        if n % 1000 == 0 {
            longest = longest.max(one.elapsed());
        }
    }
    let set = started.elapsed();
    let (serialize, crc) = writer.join().expect("serializer");
    println!("freeze()          {:.3} ms", freeze.as_secs_f64() * 1e3);
    println!(
        "to_bytes() apart  {:.1} ms ({crc:08x})",
        serialize.as_secs_f64() * 1e3
    );
    println!(
        "setData, shared   {} (longest sampled {:.3} ms)",
        rate(sets, set),
        longest.as_secs_f64() * 1e3
    );
}
