// The client of one sidecar.

import api from "./contract.js";
import { Transport, duration, type SseEvent } from "./http.js";
import { electionOp, runLeaderElection, type LeaderElectionOptions, type LeaderInfo } from "./leader.js";
import { LOCK_OPS, SEMAPHORE_OPS, acquire, type Lock, type LockOptions } from "./lock.js";

const { op, param } = api;

export const DEFAULT_ADDRESS = "127.0.0.1:4040";

/** The name of the event `events()` adds when the stream to the sidecar breaks. */
export const DISCONNECTED = "disconnected";

/** The answer of GET /members/NAME: the live members in queue order (the first leads). */
export interface Members {
  election: string;
  version: string;
  members: { identity: string; address: string | null; pod: string | null; since: string; token: number; leader: boolean; node: string }[];
}

/** One grant or waiter of a lock (`mode`) or semaphore (`permits`). */
export interface Holder {
  identity: string;
  mode?: string;
  permits?: number | null;
  token: number;
  leaseExpiresAt: string | null;
  node: string;
}

/** The answer of GET /lock/NAME (`lock`, `holder`) and GET /semaphore/NAME (`semaphore`, `permits`). */
export interface LockState {
  lock?: string;
  holder?: Holder | null;
  semaphore?: string;
  permits?: number | null;
  holders: Holder[];
  waiters: Holder[];
  self: {
    identity: string;
    holds: boolean;
    token: number | null;
    hold: "stream" | "lease" | null;
    mode?: string | null;
    expiresAt: string | null;
    validUntil: string | null;
  };
}

export interface ClientOptions {
  /** How long a stream may stay silent before it is taken as dead (the sidecar sends a
   * keep-alive every 10 s). Default 25 s. */
  streamIdleMs?: number;
}

/** A client of the sidecar at `address` ("HOST:PORT" or "http://HOST:PORT"); undefined means
 * $BATON_SIDECAR, else 127.0.0.1:4040. */
export class Client {
  private readonly t: Transport;
  private readonly idleMs: number;

  constructor(address?: string, options: ClientOptions = {}) {
    const raw = address || process.env.BATON_SIDECAR || DEFAULT_ADDRESS;
    const url = new URL(raw.includes("://") ? raw : `http://${raw}`);
    this.t = new Transport(url.hostname, Number(url.port || 80));
    this.idleMs = options.streamIdleMs ?? 25_000;
  }

  /** GET /leader[/NAME]. */
  leader(election?: string): Promise<LeaderInfo> {
    return this.t.call<LeaderInfo>(electionOp(election, op.leader, op.leaderDefault), election ?? "");
  }

  /** Long-polls until the leader's token differs from `token`, or `waitMs` passes (`signal` gives up). */
  waitLeaderChange(election: string, token: number, waitMs: number, signal?: AbortSignal): Promise<LeaderInfo> {
    const query = { [param.wait]: duration(waitMs), [param.token]: token };
    return this.t.call<LeaderInfo>(electionOp(election, op.leader, op.leaderDefault), election, query, waitMs, signal);
  }

  async resign(election?: string): Promise<void> {
    await this.t.call(electionOp(election, op.leaderResign, op.leaderResignDefault), election ?? "");
  }

  /** Answers stepping-down (runLeaderElection does it for the app); whether this pod led. */
  async release(election?: string): Promise<boolean> {
    const answer = await this.t.call<{ wasLeader: boolean }>(electionOp(election, op.leaderRelease, op.leaderReleaseDefault), election ?? "");
    return answer.wasLeader;
  }

  /** Follows (or, with `campaign` under the sidecar's --candidacy app, stands in) an election
   * until `signal` aborts, running `onStartedLeading(term)` for each term this pod leads;
   * `term.signal` aborts the moment leadership is lost, the session is suspended, validUntil
   * passes or the sidecar steps down. On the sidecar's SIGTERM (stepping-down) it ends the
   * term, waits for onStartedLeading to settle, releases the election so the next pod leads at
   * once, and resolves. */
  runLeaderElection(options: LeaderElectionOptions): Promise<void> {
    return runLeaderElection(this.t, options, this.idleMs);
  }

  /** Acquires lock `name`: held by a stream (it dies with this process) unless `ttlMs` asks for
   * a lease, which this client renews until the first renewal fails. */
  /** Acquires lock `name`: held by a stream (it dies with this process) unless `ttlMs` asks
   * for a lease. `waitMs`: undefined queues until granted or `signal` aborts, 0 tries once
   * (NotGranted when held), up to 600 000 queues that long (NotGranted after); more throws a
   * RangeError before any call, as does a `ttlMs` outside 100 ms to 24 h. */
  lock(name: string, options: LockOptions = {}): Promise<Lock> {
    const query = options.mode ? { [param.mode]: options.mode } : {};
    return acquire(this.t, LOCK_OPS, name, query, options, this.idleMs);
  }

  /** `lock(name, { waitMs: 0 })`: granted only if free now, else NotGranted. */
  tryLock(name: string, options: Omit<LockOptions, "waitMs" | "signal"> = {}): Promise<Lock> {
    return this.lock(name, { ...options, waitMs: 0 });
  }

  /** GET /lock/NAME: holders, waiters, and whether (`self`) this pod holds it. */
  lockState(name: string): Promise<LockState> {
    return this.t.call<LockState>(LOCK_OPS.inspect, name);
  }

  /** GET /semaphore/NAME: its permits, holders, waiters, and this pod's part (`self`). */
  semaphoreState(name: string): Promise<LockState> {
    return this.t.call<LockState>(SEMAPHORE_OPS.inspect, name);
  }

  /** Releases this pod's permit `token` of semaphore `name` by its token alone. */
  async releaseSemaphore(name: string, token: number): Promise<void> {
    await this.t.call(SEMAPHORE_OPS.release, name, { [param.token]: token });
  }

  /** `semaphore(name, permits, { waitMs: 0 })`: a permit only if one is free now, else NotGranted. */
  trySemaphore(name: string, permits: number, options: Omit<LockOptions, "mode" | "waitMs" | "signal"> = {}): Promise<Lock> {
    return this.semaphore(name, permits, { ...options, waitMs: 0 });
  }

  /** Whether the sidecar has a session with the ensemble (GET /readyz). */
  async healthy(): Promise<boolean> {
    try {
      await this.t.call(op.readyz, "");
      return true;
    } catch {
      return false;
    }
  }

  /** Releases the grant `token` of lock `name` held through this sidecar (Lock.release does it
   * for a Lock of this process). */
  async releaseLock(name: string, token: number): Promise<void> {
    await this.t.call(LOCK_OPS.release, name, { [param.token]: token });
  }

  /** One of `permits` permits of semaphore `name`, held and released as a lock is. */
  semaphore(name: string, permits: number, options: Omit<LockOptions, "mode"> = {}): Promise<Lock> {
    return acquire(this.t, SEMAPHORE_OPS, name, { [param.permits]: permits }, options, this.idleMs);
  }

  /** The live members of `election`; with `version`, waits up to `waitMs` for them to differ (`signal` gives up). */
  members(election: string, version?: string, waitMs = 0, signal?: AbortSignal): Promise<Members> {
    const query = version ? { [param.version]: version, [param.wait]: duration(waitMs) } : undefined;
    return this.t.call<Members>(op.members, election, query, waitMs, signal);
  }

  /** Enters barrier `name`; resolves once `parties` pods are in, rejects with NotPassed after `waitMs` (`signal` gives up). */
  async barrier(name: string, parties: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    await this.t.call(op.barrier, name, { [param.parties]: parties, [param.wait]: duration(waitMs) }, waitMs, signal);
  }

  /** The pod's events (GET /events) until `signal` aborts, reopening the stream when it breaks
   * after an event named DISCONNECTED (stop acting: nothing known is current until the next
   * `state`, which the reopened stream starts with). A `state` event whose data.state is
   * SUSPENDED means stop acting too. */
  async *events(signal?: AbortSignal): AsyncGenerator<SseEvent> {
    let backoff = 100;
    while (!signal?.aborted) {
      let why: unknown;
      try {
        const stream = await this.t.stream(op.events, "", undefined, this.idleMs);
        const close = () => stream.close();
        signal?.addEventListener("abort", close, { once: true });
        backoff = 100;
        try {
          for (;;) {
            const event = await stream.next();
            if (!event) break;
            yield event;
          }
        } finally {
          signal?.removeEventListener("abort", close);
          stream.close();
        }
      } catch (e) {
        why = e;
      }
      if (signal?.aborted) return;
      yield { name: DISCONNECTED, data: { error: String(why ?? "the sidecar ended the stream") } };
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(backoff * 2, 2000);
    }
  }
}
