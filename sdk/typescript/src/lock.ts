// Locks and semaphore permits: held by a stream (the default: the lock dies with the process)
// or by a lease this client renews, stopping at the first renewal that fails.

import api from "./contract.js";
import { BatonError, Lost, NotGranted, NotHeld, Released, StaleToken, ValidUntilPassed, type Ended } from "./errors.js";
import { CALL_SLACK_MS, duration, parseTime, pathOf, type EventStream, type Operation, type Query, type Transport } from "./http.js";

const { op, param, hold, bound } = api;

/** The operations on the grants of a lock, or of a semaphore. */
export interface GrantOps {
  acquire: Operation;
  inspect: Operation;
  release: Operation;
  renew: Operation;
}

export const LOCK_OPS: GrantOps = { acquire: op.lockAcquire, inspect: op.lockInspect, release: op.lockRelease, renew: op.lockRenew };
export const SEMAPHORE_OPS: GrantOps = {
  acquire: op.semaphoreAcquire,
  inspect: op.semaphoreInspect,
  release: op.semaphoreRelease,
  renew: op.semaphoreRenew,
};

/** The sidecar's answer to an acquire. */
export interface Grant {
  lock?: string;
  semaphore?: string;
  permits?: number;
  mode: string;
  /** The fencing token: pass it to what the lock protects. */
  token: number;
  hold: "stream" | "lease";
  expiresAt: string | null;
  validUntil: string | null;
}

export interface LockOptions {
  /** read or write (default exclusive). */
  mode?: "read" | "write";
  /** How long to queue, in ms: undefined until granted or `signal` aborts (in calls of at most
   * 600 s), 0 try once, at most 600 000 (more is a RangeError before any call). */
  waitMs?: number;
  /** A lease of this many ms, renewed by this client, instead of a stream hold: 100 to 86 400 000
   * (24 h; else a RangeError before any call). */
  ttlMs?: number;
  /** Gives up queueing when aborted. */
  signal?: AbortSignal;
}

/** A held lock or permit. `signal` aborts the moment the grant is known to have ended (lost,
 * released, a renewal failed, validUntil passed without fresher word); its `reason` is an
 * `Ended` (`Lost`, `ValidUntilPassed`, `Released`). `await using` releases it. */
export class Lock implements AsyncDisposable {
  readonly token: number;
  private readonly controller = new AbortController();
  private validUntilMs: number;
  /** Whether the sidecar's session is cut off now (the lock stands until validUntil). */
  suspended = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly following: Promise<void> | undefined;
  /** The grant's path, for messages. */
  private readonly path: string;

  constructor(
    private readonly t: Transport,
    private readonly ops: GrantOps,
    private readonly name: string,
    readonly grant: Grant,
    private readonly stream: EventStream | undefined,
    private readonly ttlMs: number | undefined,
  ) {
    this.path = pathOf(ops.inspect, name);
    this.token = grant.token;
    this.validUntilMs = parseTime(grant.validUntil) ?? 0;
    this.following = stream ? this.follow(stream) : undefined;
    this.schedule();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The latest promise (ms since the epoch): until then the holder may act. */
  get validUntil(): number {
    return this.validUntilMs;
  }

  /** Throws why the grant ended, once it has: call it before each protected step. */
  check(): void {
    this.controller.signal.throwIfAborted();
  }

  /** Releases (DELETE with the token; a stream hold's stream closes too) and stops renewing.
   * Releasing a grant that already ended is not an error. */
  async release(): Promise<void> {
    if (!this.signal.aborted) {
      try {
        await this.t.call(this.ops.release, this.name, { [param.token]: this.token });
      } catch (e) {
        if (!(e instanceof StaleToken || e instanceof NotHeld) && !this.stream) throw e;
      }
    }
    this.end(new Released(this.path));
    await this.following;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  private end(reason: Ended): void {
    if (this.signal.aborted) return;
    clearTimeout(this.timer);
    this.controller.abort(reason);
    this.stream?.close();
  }

  private async follow(stream: EventStream): Promise<void> {
    for (;;) {
      let event;
      try {
        event = await stream.next();
      } catch (e) {
        this.end(new Lost(`${this.path}: the hold's stream broke`, { cause: e }));
        return;
      }
      if (!event) {
        this.end(new Lost(`${this.path}: the sidecar ended the hold's stream`));
        return;
      }
      const data = (event.data ?? {}) as { reason?: string; validUntil?: string };
      if (event.name === "lost") {
        this.end(new Lost(`${this.path}: ${data.reason}`));
        return;
      }
      if (event.name === "released") {
        this.end(new Released(`${this.path}: ${data.reason}`));
        return;
      }
      if (event.name === "suspended") {
        this.suspended = true;
        const until = parseTime(data.validUntil);
        if (until !== undefined && until < this.validUntilMs) this.validUntilMs = until;
        this.schedule();
      } else if (event.name === "resumed") {
        this.suspended = false;
      }
    }
  }

  /** Ends the grant at validUntil; refreshes validUntil every third of the time left (a lease
   * by renewing it, at least every third of its TTL; a stream hold by asking the sidecar). */
  private schedule(): void {
    clearTimeout(this.timer);
    if (this.signal.aborted) return;
    const left = this.validUntilMs - Date.now();
    if (left <= 0) {
      this.end(new ValidUntilPassed(this.path));
      return;
    }
    let step = left / 3;
    if (this.ttlMs) step = Math.min(step, this.ttlMs / 3);
    this.timer = setTimeout(() => void this.refresh(), Math.max(step, 50));
  }

  private async refresh(): Promise<void> {
    if (Date.now() >= this.validUntilMs) {
      this.end(new ValidUntilPassed(this.path));
      return;
    }
    // The promise still bounds the grant while the refresh is out.
    const deadline = setTimeout(() => this.end(new ValidUntilPassed(this.path)), this.validUntilMs - Date.now());
    try {
      const fresh = await this.fetchValidUntil();
      if (fresh !== undefined && fresh > this.validUntilMs && (this.ttlMs || !this.suspended)) this.validUntilMs = fresh;
    } catch (e) {
      if (this.ttlMs) {
        // Never retried: the lease may be gone, and a renew loop outliving its lock is the
        // bug this client exists to prevent.
        this.end(new Lost(`${this.path}: renewal failed`, { cause: e }));
      } else if (e instanceof BatonError && Math.floor(e.status / 100) === 4) {
        this.end(new Lost(`${this.path}: ${e.message}`, { cause: e }));
      }
      // Else a stream hold: its stream says when it ends; validUntil bounds it.
    } finally {
      clearTimeout(deadline);
    }
    this.schedule();
  }

  private async fetchValidUntil(): Promise<number | undefined> {
    const left = Math.max(this.validUntilMs - Date.now(), 1);
    if (this.ttlMs) {
      const grant = await this.t.call<Grant>(this.ops.renew, this.name, { [param.token]: this.token }, left - CALL_SLACK_MS);
      return parseTime(grant.validUntil);
    }
    const state = await this.t.call<{ self?: { holds?: boolean; token?: number; validUntil?: string } }>(this.ops.inspect, this.name);
    if (!state.self?.holds || state.self.token !== this.token) {
      throw new NotHeld(409, "NotHeld", "the sidecar no longer holds this grant");
    }
    return parseTime(state.self.validUntil);
  }
}

/** A wait the sidecar would refuse is refused here, before any call. */
export function checkWait(waitMs: number | undefined): void {
  if (waitMs !== undefined && !(waitMs >= bound.waitMinMs && waitMs <= bound.waitMaxMs)) {
    throw new RangeError(`waitMs ${waitMs}: ${bound.waitMinMs} (try once) to ${bound.waitMaxMs}, or undefined to wait until granted or aborted`);
  }
}

/** A lease the sidecar would refuse is refused here, before any call (undefined or 0: a stream hold). */
export function checkTtl(ttlMs: number | undefined): void {
  if (ttlMs && !(ttlMs >= bound.ttlMinMs && ttlMs <= bound.ttlMaxMs)) {
    throw new RangeError(`ttlMs ${ttlMs}: a lease is ${bound.ttlMinMs} to ${bound.ttlMaxMs} ms (undefined: held by a stream)`);
  }
}

export async function acquire(t: Transport, ops: GrantOps, name: string, query: Query, opts: LockOptions, idleMs: number): Promise<Lock> {
  checkWait(opts.waitMs);
  checkTtl(opts.ttlMs);
  for (;;) {
    opts.signal?.throwIfAborted();
    const wait = opts.waitMs ?? bound.waitMaxMs;
    const q: Query = { ...query, [param.wait]: duration(wait) };
    try {
      if (opts.ttlMs) {
        const grant = await t.call<Grant>(ops.acquire, name, { ...q, [param.ttl]: duration(opts.ttlMs) }, wait, opts.signal);
        return new Lock(t, ops, name, grant, undefined, opts.ttlMs);
      }
      // The caller's signal bounds only the queueing: aborted later, it must not end the hold.
      const queueing = new AbortController();
      const giveUp = () => queueing.abort(opts.signal?.reason);
      opts.signal?.addEventListener("abort", giveUp, { once: true });
      let stream: EventStream;
      let first;
      try {
        stream = await t.stream(ops.acquire, name, { ...q, [param.hold]: hold.stream }, idleMs, queueing.signal);
        try {
          first = await stream.next();
        } catch (e) {
          stream.close();
          throw e;
        }
      } finally {
        opts.signal?.removeEventListener("abort", giveUp);
      }
      if (!first || first.name !== "granted") {
        stream.close();
        throw new Lost(`${pathOf(ops.acquire, name)}: first event ${first?.name}`);
      }
      return new Lock(t, ops, name, first.data as Grant, stream, undefined);
    } catch (e) {
      // Only an unbounded wait goes on: the sidecar gives one call 600 s at most.
      if (!(e instanceof NotGranted) || opts.waitMs !== undefined || opts.signal?.aborted) throw e;
    }
  }
}
