//! App-held candidacy (`--candidacy app`, `GET /leader/NAME/campaign`) across real sidecar
//! processes: a pod stands only while its app holds the stream open, and an app killed with
//! `kill -9` hands leadership to the next campaigning pod.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use common::sse::EventStream;
use common::{BOUND, Sidecar, unique};
use serde_json::Value;

const APP_HELD: &[&str] = &["--candidacy", "app"];

/// An app process holding a stream open with `curl -N`, until it is killed.
struct CurlStream {
    child: std::process::Child,
    events: mpsc::Receiver<(String, Value)>,
}

impl CurlStream {
    fn start(sidecar: &Sidecar, path: &str) -> Self {
        let url = format!("http://{}{path}", sidecar.addr);
        let mut child = Command::new("curl")
            .args(["-sN", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run curl");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            let mut name = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let (Some(d), Some(n)) = (line.strip_prefix("data: "), name.take()) {
                    let data = serde_json::from_str(d).unwrap_or(Value::Null);
                    if tx.send((n, data)).is_err() {
                        break;
                    }
                }
            }
        });
        Self { child, events }
    }

    /// Skips events until one named `name`.
    fn wait_event(&self, name: &str) -> Value {
        loop {
            let (n, data) = self
                .events
                .recv_timeout(BOUND)
                .unwrap_or_else(|_| panic!("curl got no {name:?} event"));
            if n == name {
                return data;
            }
        }
    }

    /// `kill -9`: no goodbye, the kernel closes the socket.
    fn kill(mut self) {
        self.child.kill().expect("kill -9 curl");
        let _ = self.child.wait();
    }
}

fn identities(members: &Value) -> Vec<String> {
    members["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["identity"].as_str().map(str::to_owned))
        .collect()
}

async fn a_killed_campaigning_app_hands_leadership_to_the_next_campaign() {
    let election = unique("campaign");
    let a = Sidecar::start_with(&format!("{election}-a"), &[&election], APP_HELD);
    let b = Sidecar::start_with(&format!("{election}-b"), &[&election], APP_HELD);
    let path = format!("/leader/{election}/campaign");

    let app_a = CurlStream::start(&a, &path);
    let elected = app_a.wait_event("elected");
    assert_eq!(elected["election"], election.as_str(), "{elected}");
    let token = elected["token"].as_i64().expect("a fencing token");
    assert!(elected["validUntil"].is_string(), "{elected}");

    // One campaign per election per pod.
    let second = EventStream::open(a.addr, "GET", &path).await;
    let refused = second.err().expect("refused");
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.body["error"]["code"], "CampaignInProgress",
        "{refused:?}"
    );

    // b's app campaigns too and queues behind a.
    let mut app_b = EventStream::open(b.addr, "GET", &path)
        .await
        .expect("a campaign stream");
    let candidate = app_b.wait_for("candidate", |_| true).await;
    assert_eq!(candidate["leader"]["identity"], a.identity, "{candidate}");
    assert!(candidate["node"].is_string(), "{candidate}");

    // a's app dies: its socket closes, a withdraws, b is elected.
    app_a.kill();
    let elected = app_b.wait_for("elected", |_| true).await;
    assert!(
        elected["token"].as_i64().is_some_and(|t| t > token),
        "{elected}"
    );
    a.wait_log("campaign stream closed: withdrawing the candidacy");
    let members = b.call("GET", &format!("/members/{election}")).await;
    assert_eq!(
        identities(&members.body),
        [b.identity.as_str()],
        "{members:?}"
    );

    // b's app closes its stream: b withdraws too, and nobody leads.
    drop(app_b);
    let gone = a
        .call(
            "GET",
            &format!(
                "/leader/{election}?wait=60s&token={}",
                elected["token"].as_i64().unwrap_or(0)
            ),
        )
        .await;
    assert!(gone.body["leader"].is_null(), "{gone:?}");
}

async fn an_app_candidacy_without_a_campaign_never_stands() {
    let election = unique("no-campaign");
    // Started first: were it standing, it would be first in the queue and lead.
    let idle = Sidecar::start_with(&format!("{election}-idle"), &[&election], APP_HELD);
    let always = Sidecar::start(&format!("{election}-always"), &[&election]);
    let led = always
        .call("GET", &format!("/leader/{election}?wait=60s&token=0"))
        .await;
    assert_eq!(led.body["leader"]["identity"], always.identity, "{led:?}");
    assert_eq!(led.body["self"]["isLeader"], true, "{led:?}");
    let members = idle.call("GET", &format!("/members/{election}")).await;
    assert_eq!(
        identities(&members.body),
        [always.identity.as_str()],
        "only the standing pod is a member: {members:?}"
    );
    let seen = idle.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(seen.body["self"]["isLeader"], false, "{seen:?}");
    assert_eq!(seen.body["leader"]["identity"], always.identity, "{seen:?}");

    // Campaigning is for --candidacy app; release is for a shutdown.
    let refused = EventStream::open(always.addr, "GET", &format!("/leader/{election}/campaign"))
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(
        refused.body["error"]["code"], "CandidacyAlways",
        "{refused:?}"
    );
    let early = always
        .call("POST", &format!("/leader/{election}/release"))
        .await;
    assert_eq!(early.status, 409, "{early:?}");
    assert_eq!(early.error_code(), "NotSteppingDown");
    let still = always.call("GET", &format!("/leader/{election}")).await;
    assert_eq!(still.body["self"]["isLeader"], true, "{still:?}");
}

against_both!(
    a_killed_campaigning_app_hands_leadership_to_the_next_campaign,
    an_app_candidacy_without_a_campaign_never_stands,
);
