import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";

import { Client, DISCONNECTED, Lost, NotPassed, SteppingDown, Suspended, type Ended, type Leader, type LeaderElectionOptions, type LeaderInfo, type Term } from "../src/index.js";
import { BOUND_MS, Proxy, Sidecar, aborted, bounded, env, unique } from "./harness.js";

/** Runs runLeaderElection and records what its callbacks saw. */
class Terms {
  private readonly starts: Term[] = [];
  readonly all: Term[] = [];
  private wake: (() => void) | undefined;
  readonly stopped: Ended[] = [];
  readonly leaders: (Leader | null)[] = [];
  readonly controller = new AbortController();
  readonly done: Promise<void>;

  constructor(t: TestContext, client: Client, options: Omit<LeaderElectionOptions, "onStartedLeading">) {
    this.done = client.runLeaderElection({
      ...options,
      signal: this.controller.signal,
      onStartedLeading: async (term) => {
        this.starts.push(term);
        this.all.push(term);
        this.wake?.();
        await aborted(term.signal, "a term that never ends"); // an app that leads until told to stop
      },
      onStoppedLeading: (reason) => this.stopped.push(reason),
      onNewLeader: (leader) => this.leaders.push(leader),
    });
    t.after(() => this.finish());
  }

  async nextStart(): Promise<Term> {
    return bounded(
      new Promise<Term>((resolve) => {
        const look = () => {
          const term = this.starts.shift();
          if (term) resolve(term);
          else this.wake = look;
        };
        look();
      }),
      "never started leading",
    );
  }

  async finish(): Promise<void> {
    this.controller.abort();
    await this.done.catch(() => undefined);
  }
}

/** Long-polls until `identity` leads (a hand-over may pass through a moment with no leader,
 * which a single long-poll would answer). */
async function waitLeader(client: Client, election: string, identity: string): Promise<LeaderInfo> {
  return bounded(
    (async () => {
      let token = 0;
      for (;;) {
        const info = await client.waitLeaderChange(election, token, BOUND_MS);
        if (info.leader?.identity === identity) return info;
        token = info.leader?.token ?? 0;
      }
    })(),
    `${identity} leading ${election}`,
  );
}

test("runs the leader and ends the term when deposed", async (t) => {
  const election = unique("election");
  const a = await Sidecar.start(t, undefined, unique("a"), [election]);
  const terms = new Terms(t, new Client(a.addr), { election });
  const term = await terms.nextStart();
  const b = await Sidecar.start(t, undefined, unique("b"), [election]);
  const seen = await waitLeader(new Client(b.addr), election, a.identity);
  assert.equal(seen.leader?.identity, a.identity);
  assert.equal(seen.leader?.token, term.token);
  await new Client(a.addr).resign(election); // behind the app's back
  assert.ok((await aborted(term.signal)) instanceof Lost);
  await waitLeader(new Client(b.addr), election, b.identity);
  assert.ok(terms.stopped[0] instanceof Lost);
  assert.equal(terms.leaders[0]?.identity, a.identity);
});

test("SIGTERM hands leadership over", async (t) => {
  const election = unique("handoff");
  // The longest grace: only the client's release can end the wait within the test.
  const a = await Sidecar.start(t, undefined, unique("a"), [election], "--release-grace", "5m");
  const terms = new Terms(t, new Client(a.addr), { election });
  const term = await terms.nextStart();
  const b = await Sidecar.start(t, undefined, unique("b"), [election]);
  a.signal("SIGTERM");
  await waitLeader(new Client(b.addr), election, b.identity);
  await bounded(terms.done, "runLeaderElection returned after the hand-over");
  // The last term is the one stepping-down ended (the sidecar may have said "not leading,
  // leading again" in between: that ends a term and starts another with the same token).
  const last = terms.all[terms.all.length - 1] ?? term;
  assert.ok(last.signal.reason instanceof SteppingDown, String(last.signal.reason));
  assert.equal(await bounded(a.exit, "the sidecar's exit"), 0);
  await a.waitLog("the app released the election");
});

test("a suspended session stops the leader until it resumes", async (t) => {
  const election = unique("suspend");
  const link = await Proxy.start(t, env("BATON_SDK_ENSEMBLE"));
  const a = await Sidecar.start(t, link.addr, unique("a"), [election]);
  const client = new Client(a.addr);
  const stopEvents = new AbortController();
  t.after(() => stopEvents.abort());
  const states: string[] = [];
  let stateSeen: (() => void) | undefined;
  void (async () => {
    for await (const event of client.events(stopEvents.signal)) {
      if (event.name === "state") {
        states.push((event.data as { state: string }).state);
        stateSeen?.();
      }
    }
  })();
  const terms = new Terms(t, client, { election });
  const term = await terms.nextStart();
  link.setCut(true);
  const reason = await aborted(term.signal);
  assert.ok(reason instanceof Suspended || reason instanceof Lost, String(reason));
  await bounded(
    new Promise<void>((resolve) => {
      stateSeen = () => states.includes("SUSPENDED") && resolve();
      stateSeen();
    }),
    "a SUSPENDED state event",
  );
  link.setCut(false);
  const again = await terms.nextStart();
  assert.equal(again.token, term.token, "the resumed session leads on with the same token");
});

test("a campaign stands while it runs", async (t) => {
  const election = unique("campaign");
  const a = await Sidecar.start(t, undefined, unique("a"), [election], "--candidacy", "app");
  const b = await Sidecar.start(t, undefined, unique("b"), [election]);
  await waitLeader(new Client(b.addr), election, b.identity);
  const terms = new Terms(t, new Client(a.addr), { election, campaign: true });
  let members = await new Client(b.addr).members(election);
  while (members.members.length < 2) members = await new Client(b.addr).members(election, members.version, 30_000);
  await new Client(b.addr).resign(election);
  const term = await terms.nextStart();
  await terms.finish();
  assert.ok(term.signal.aborted);
  await waitLeader(new Client(b.addr), election, b.identity);
});

test("members and barrier", async (t) => {
  const election = unique("group");
  const a = await Sidecar.start(t, undefined, unique("a"), [election]);
  const b = await Sidecar.start(t, undefined, unique("b"), [election]);
  let members = await new Client(a.addr).members(election);
  while (members.members.length < 2) members = await new Client(a.addr).members(election, members.version, 30_000);
  // Queue order is creation order, and both sidecars start their candidacy at once.
  assert.deepEqual(members.members.map((m) => m.identity).sort(), [a.identity, b.identity].sort());
  assert.deepEqual(members.members.map((m) => m.leader), [true, false]);
  const name = unique("barrier");
  await Promise.all([new Client(a.addr).barrier(name, 2, BOUND_MS), new Client(b.addr).barrier(name, 2, BOUND_MS)]);
  await assert.rejects(new Client(a.addr).barrier(unique("alone"), 2, 0), NotPassed);
});

test("against Apache ZooKeeper", async (t) => {
  const election = unique("zk");
  const a = await Sidecar.start(t, env("BATON_SDK_ZOOKEEPER"), unique("a"), [election]);
  const client = new Client(a.addr);
  const term = await new Terms(t, client, { election }).nextStart();
  const held = await client.lock(unique("lock"));
  assert.ok(held.token > term.token, "tokens are czxids");
  a.signal("SIGKILL");
  assert.ok((await aborted(held.signal)) instanceof Lost);
  await aborted(term.signal);
});

test("the event stream reconnects after the sidecar restarts", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const stop = new AbortController();
  t.after(() => stop.abort());
  const events = new Client(s.addr).events(stop.signal);
  const next = (want: (e: { name: string; data: unknown }) => boolean) =>
    bounded(
      (async () => {
        for (;;) {
          const { value, done } = await events.next();
          if (done) throw new Error("the event stream ended");
          if (want(value)) return value;
        }
      })(),
      "an event",
    );
  const connected = (e: { name: string; data: unknown }) => e.name === "state" && (e.data as { state: string }).state === "CONNECTED";
  await next(connected);
  s.signal("SIGKILL");
  const gone = await next((e) => e.name === DISCONNECTED);
  assert.ok((gone.data as { error: string }).error);
  await Sidecar.start(t, undefined, unique("a"), [], "--listen", s.addr);
  await next(connected);
});
