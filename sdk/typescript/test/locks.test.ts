import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { AlreadyHeld, Client, InvalidPermits, Lost, NotGranted, NotHeld, Released, ValidUntilPassed, type Lock } from "../src/index.js";
import { BOUND_MS, Proxy, Sidecar, aborted, unique } from "./harness.js";

test("a stream hold is exclusive and released by await using", async (t) => {
  const name = unique("lock");
  const a = new Client((await Sidecar.start(t, undefined, unique("a"))).addr);
  const b = new Client((await Sidecar.start(t, undefined, unique("b"))).addr);
  let first: Lock;
  let waiter: Promise<Lock>;
  {
    await using held = await a.lock(name);
    first = held;
    assert.equal(held.grant.hold, "stream");
    assert.equal(held.grant.lock, name);
    assert.equal(held.grant.expiresAt, null);
    assert.ok(held.token > 0);
    await assert.rejects(b.tryLock(name), (e) => e instanceof NotGranted && e.status === 409);
    await assert.rejects(a.lock(name, { waitMs: 0 }), AlreadyHeld);
    waiter = b.lock(name, { waitMs: BOUND_MS });
    // Polled: no event says a pod queued.
    while ((await a.lockState(name)).waiters.length === 0) await sleep(20);
  }
  assert.ok(first.signal.reason instanceof Released, String(first.signal.reason));
  const second = await waiter;
  assert.ok(second.token > first.token, "the fencing token grows");
  await second.release();
});

test("a killed sidecar ends the stream hold within validUntil", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const held = await new Client(s.addr).lock(unique("lock"));
  const validUntil = held.validUntil;
  s.signal("SIGKILL");
  assert.ok((await aborted(held.signal)) instanceof Lost);
  assert.ok(Date.now() <= validUntil, "learnt of the loss after validUntil");
});

test("a hung sidecar ends the hold at validUntil", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const held = await new Client(s.addr).lock(unique("lock"));
  s.signal("SIGSTOP");
  t.after(() => s.signal("SIGCONT"));
  assert.ok((await aborted(held.signal)) instanceof ValidUntilPassed, String(held.signal.reason));
  assert.ok(Date.now() >= held.validUntil);
  assert.throws(() => held.check(), ValidUntilPassed);
});

test("a lease ends at the first failed renewal, and renewals stop", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const client = new Client(s.addr);
  const name = unique("lease");
  const held = await client.lock(name, { ttlMs: 3000 });
  assert.equal(held.grant.hold, "lease");
  await sleep(4000); // renewals keep it past its TTL
  assert.equal(held.signal.aborted, false, "a renewed lease ended");
  await client.releaseLock(name, held.token); // behind the Lock's back
  const reason = await aborted(held.signal);
  assert.ok(reason instanceof Lost && reason.cause instanceof NotHeld, String(reason));
  const renewals = s.lines.filter((l) => l.includes("/renew")).length;
  await sleep(2500); // two more renewals (every second) had the loop gone on
  assert.equal(s.lines.filter((l) => l.includes("/renew")).length, renewals, "renewals went on after the failure");
});

test("a killed sidecar ends the lease", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const held = await new Client(s.addr).lock(unique("lease"), { ttlMs: 30_000 });
  const validUntil = held.validUntil;
  s.signal("SIGKILL");
  assert.ok((await aborted(held.signal)) instanceof Lost);
  assert.ok(Date.now() <= validUntil);
});

test("semaphore permits", async (t) => {
  const name = unique("sem");
  const held = [
    await new Client((await Sidecar.start(t, undefined, unique("p"))).addr).semaphore(name, 2),
    await new Client((await Sidecar.start(t, undefined, unique("p"))).addr).semaphore(name, 2),
  ];
  assert.equal(held[0].grant.semaphore, name);
  assert.equal(held[0].grant.permits, 2);
  const third = new Client((await Sidecar.start(t, undefined, unique("p"))).addr);
  await assert.rejects(third.semaphore(name, 2, { waitMs: 0 }), NotGranted);
  await assert.rejects(third.semaphore(name, 0), InvalidPermits);
  await held[0].release();
  await (await third.semaphore(name, 2, { waitMs: BOUND_MS })).release();
  await held[1].release();
});

test("cutting the app's connection ends the hold on both sides", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const link = await Proxy.start(t, s.addr);
  const name = unique("lock");
  const held = await new Client(link.addr).lock(name);
  const validUntil = held.validUntil;
  link.setCut(true);
  assert.ok((await aborted(held.signal)) instanceof Lost);
  assert.ok(Date.now() <= validUntil, "learnt of the loss after validUntil");
  // Another pod (this one's release of the closed stream is on its way, not yet done).
  const other = await Sidecar.start(t, undefined, unique("b"));
  const after = await new Client(other.addr).lock(name, { waitMs: BOUND_MS });
  assert.ok(after.token > held.token);
  await after.release();
});

test("a wait or a lease outside the sidecar's bounds is refused before any call; an aborted wait ends", async (t) => {
  const c = new Client((await Sidecar.start(t, undefined, unique("a"))).addr);
  const name = unique("lock");
  await assert.rejects(c.lock(name, { waitMs: 600_001 }), RangeError);
  await assert.rejects(c.lock(name, { waitMs: -1 }), RangeError);
  await assert.rejects(c.lock(name, { ttlMs: 50 }), RangeError); // a lease is 100 ms to 24 h
  await assert.rejects(c.lock(name, { ttlMs: 86_400_001 }), RangeError);
  assert.equal(await c.healthy(), true);
  const permit = await c.semaphore(name, 2, { ttlMs: 30_000 });
  const state = await c.semaphoreState(name);
  assert.equal(state.permits, 2);
  assert.equal(state.self.holds, true);
  assert.equal(state.self.token, permit.token);
  await c.releaseSemaphore(name, permit.token);
  assert.equal((await c.semaphoreState(name)).self.holds, false);
  await permit.release();
  const other = new Client((await Sidecar.start(t, undefined, unique("b"))).addr);
  await using held = await c.tryLock(name);
  const stop = new AbortController();
  const waiting = other.lock(name, { signal: stop.signal });
  while ((await c.lockState(name)).waiters.length === 0) await sleep(20);
  stop.abort(new Error("stopped"));
  await assert.rejects(waiting);
  assert.ok(held.token > 0);
  const leave = new AbortController();
  const barrier = c.barrier(unique("barrier"), 2, 30_000, leave.signal);
  await sleep(300);
  leave.abort(new Error("left"));
  await assert.rejects(barrier);
});
