//! Membership of a running cluster through the admin API: listing, adding and removing members.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::admin::{MemberEntry, Method, Reply};
use super::member::Member;
use super::{CONVERGE_DEADLINE, Cluster, ISOLATED_PORTS, POLL_MAX, POLL_MIN};

impl Cluster {
    /// `GET /v1/members` of member `id`.
    pub async fn member_list(&self, id: u64) -> Result<Vec<MemberEntry>> {
        let reply = self.admin(id, Method::Get, "/v1/members", None).await?;
        if reply.status != 200 {
            bail!("GET /v1/members on member {id} answered {reply}");
        }
        MemberEntry::list_from_json(&reply.body)
            .with_context(|| format!("GET /v1/members on member {id}"))
    }

    /// Checks that every running member's `GET /v1/members` lists exactly `voters` (in id order),
    /// each as a voter at the peer address it was started with, and exactly one as the leader.
    pub async fn check_member_lists(&self, voters: &[u64]) -> Result<()> {
        for id in self.running_ids() {
            let listed = self.member_list(id).await?;
            let ids: Vec<u64> = listed.iter().map(|member| member.id).collect();
            if ids != voters {
                bail!("member {id} lists {listed:?}, expected {voters:?}");
            }
            for member in &listed {
                let expected = self.member(member.id)?.peer_addr().to_string();
                if member.role != "voter" || member.peer_addr != expected {
                    bail!("member {id} lists {member:?}; expected a voter at {expected}");
                }
            }
            let leaders = listed.iter().filter(|member| member.leader).count();
            if leaders != 1 {
                bail!("member {id} names {leaders} leaders: {listed:?}");
            }
        }
        Ok(())
    }

    /// Starts a new member (next free id, fresh ports and dir) with the ensemble's cluster id and
    /// `--members` listing the current members plus itself, then asks the leader to add it
    /// (POST /v1/members, 202). Returns its id without waiting for it to catch up or be promoted.
    pub async fn add_member(&mut self) -> Result<u64> {
        let leader = self.wait_for_leader().await?;
        let cluster_id = self.member(leader)?.status().await?.cluster_id;
        let id = self
            .members
            .keys()
            .copied()
            .chain(self.removed.iter().map(Member::id))
            .max()
            .map_or(1, |max| max + 1);
        // On a test network the new member runs in a spare namespace, whose address its
        // certificate (made with the others') names already.
        let (ports, place) = match &self.network {
            Some(network) => {
                let netns = network.namespace(id).with_context(|| {
                    format!("no spare namespace for member {id} (start_isolated_with_spares)")
                })?;
                (ISOLATED_PORTS, Some((netns.to_owned(), network.ip(id))))
            }
            None => {
                self.pki.add_member(id)?;
                (self.pick_ports(1)?.remove(0), None)
            }
        };
        let peer = match &place {
            Some((_, ip)) => std::net::SocketAddr::from((*ip, ports.peer)),
            None => std::net::SocketAddr::from(([127, 0, 0, 1], ports.peer)),
        };
        let listed = self
            .members
            .values()
            .map(|member| format!("{}={}", member.id(), member.peer_addr()))
            .chain([format!("{id}={peer}")])
            .collect::<Vec<_>>()
            .join(",");
        let mut member = Member::new(id, ports, listed, Some(cluster_id), &self.pki)?;
        if let Some((netns, ip)) = place {
            member.place(netns, ip);
        }
        member.spawn(&self.binary)?;
        self.members.insert(id, member);
        self.wait_until_serving(id).await?;

        let body = json!({ "id": id, "peerAddr": self.member(id)?.peer_addr().to_string() });
        let existing: Vec<u64> = self
            .running_ids()
            .into_iter()
            .filter(|m| *m != id)
            .collect();
        self.leader_command(&existing, Method::Post, "/v1/members", Some(&body))
            .await
            .with_context(|| format!("add member {id}"))?;
        Ok(id)
    }

    /// Asks the leader to remove member `id` (DELETE /v1/members/{id}, 202), waits until every
    /// other running member has applied the change, then stops the process.
    pub async fn remove_member(&mut self, id: u64) -> Result<()> {
        self.member(id)?;
        let running = self.running_ids();
        self.leader_command(&running, Method::Delete, &format!("/v1/members/{id}"), None)
            .await
            .with_context(|| format!("remove member {id}"))?;
        self.wait_for(
            &format!("every other member to drop member {id}"),
            |statuses| {
                statuses
                    .values()
                    .filter(|status| status.id != id)
                    .all(|status| !status.members.contains(&id))
            },
        )
        .await?;
        let mut member = self.members.remove(&id).context("member vanished")?;
        member.kill9()?;
        self.removed.push(member);
        Ok(())
    }

    /// Sends a membership command to the leader that `among` agree on and expects 202. Retries
    /// after a 421 (leadership moved) and a 409 "another change in progress" (a learner's
    /// promotion) until the deadline.
    async fn leader_command(
        &mut self,
        among: &[u64],
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply> {
        let deadline = Instant::now() + CONVERGE_DEADLINE;
        let mut backoff = POLL_MIN;
        loop {
            let leader = self.wait_for_leader_among(among).await?;
            let reply = self.admin(leader, method, path, body).await?;
            let retry = match reply.status {
                202 => return Ok(reply),
                421 => true,
                409 => reply
                    .body
                    .to_string()
                    .contains("another membership change is still in progress"),
                _ => false,
            };
            if !retry || Instant::now() >= deadline {
                bail!("{method} {path} on leader {leader} answered {reply}");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(POLL_MAX);
        }
    }
}
