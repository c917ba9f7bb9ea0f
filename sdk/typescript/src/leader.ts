// Leadership in the shape of client-go's leaderelection: a function runs while this pod leads,
// and its term's AbortSignal aborts the moment it no longer may act as leader.

import api from "./contract.js";
import { BatonError, CampaignInProgress, Lost, Released, ShuttingDown, SteppingDown, Suspended, ValidUntilPassed, type Ended } from "./errors.js";
import { parseTime, type EventStream, type Operation, type Transport } from "./http.js";

const { op, param, follow } = api;

/** Who leads an election, with the term's fencing token. */
export interface Leader {
  identity: string;
  address: string | null;
  pod: string | null;
  since: string;
  token: number;
}

/** The answer of GET /leader[/NAME]. */
export interface LeaderInfo {
  election: string;
  leader: Leader | null;
  self: { identity: string; isLeader: boolean; state: string; validUntil: string | null };
}

/** One stretch of leadership. `signal` aborts the moment this pod must stop acting as leader
 * (another leader, deposed, session suspended or lost, validUntil passed, stepping down); its
 * `reason` says why. Pass `token` (the fencing token) to what the leader writes to. */
export interface Term {
  election: string;
  token: number;
  since: number | undefined;
  signal: AbortSignal;
}

export interface LeaderElectionOptions {
  /** The election ("" or undefined: the sidecar's only one). */
  election?: string;
  /** Stand only while this runs (the sidecar's --candidacy app). */
  campaign?: boolean;
  /** Stops following (and, with campaign, standing) when aborted. */
  signal?: AbortSignal;
  /** Runs while this pod leads; must settle soon after term.signal aborts. */
  onStartedLeading: (term: Term) => void | Promise<void>;
  /** Called after onStartedLeading settled, with why the term ended. */
  onStoppedLeading?: (reason: Ended) => void;
  /** Called whenever another leader (or none: null) is seen. */
  onNewLeader?: (leader: Leader | null) => void;
}

/** `named`, the operation on `election`, or, for none (the sidecar's only election), `only`, its
 * form without a name. */
export function electionOp(election: string | undefined, named: Operation, only: Operation): Operation {
  return election ? named : only;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });

class Run {
  private term: { term: Term; controller: AbortController; running: Promise<void>; validUntil: number } | undefined;
  private lastLeader: number | null | undefined = undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly t: Transport,
    private readonly opts: LeaderElectionOptions,
  ) {}

  private get name(): string {
    return this.opts.election ?? "";
  }

  sawLeader(leader: Leader | null | undefined): void {
    const token = leader ? leader.token : null;
    if (token === this.lastLeader) return;
    this.lastLeader = token;
    this.opts.onNewLeader?.(leader ?? null);
  }

  start(token: number, since: string | undefined, validUntil: string | null | undefined): void {
    const until = parseTime(validUntil);
    if (until === undefined || until <= Date.now()) return;
    const controller = new AbortController();
    const term: Term = { election: this.name, token, since: parseTime(since), signal: controller.signal };
    const running = (async () => {
      try {
        await this.opts.onStartedLeading(term);
      } catch {
        // the app's own failure; the term still ends as the sidecar says
      }
    })();
    this.term = { term, controller, running, validUntil: until };
    this.schedule();
  }

  /** Ends the running term, if any, and waits for onStartedLeading to settle. */
  async stop(reason: Ended): Promise<void> {
    const current = this.term;
    if (!current) return;
    this.term = undefined;
    clearTimeout(this.timer);
    current.controller.abort(reason);
    await current.running;
    this.opts.onStoppedLeading?.(reason);
  }

  private extend(validUntil: string | null | undefined): void {
    const until = parseTime(validUntil);
    if (this.term && until !== undefined && until > this.term.validUntil) this.term.validUntil = until;
  }

  /** Ends the term at validUntil; asks for a fresher one every third of the time left. */
  private schedule(): void {
    clearTimeout(this.timer);
    const current = this.term;
    if (!current) return;
    const left = current.validUntil - Date.now();
    if (left <= 0) {
      void this.stop(new ValidUntilPassed(`election ${this.name}`));
      return;
    }
    this.timer = setTimeout(() => void this.refresh(current), Math.max(left / 3, 50));
  }

  private async refresh(current: NonNullable<Run["term"]>): Promise<void> {
    if (this.term !== current) return;
    if (Date.now() >= current.validUntil) {
      await this.stop(new ValidUntilPassed(`election ${this.name}`));
      return;
    }
    const deadline = setTimeout(() => {
      if (this.term === current) void this.stop(new ValidUntilPassed(`election ${this.name}`));
    }, current.validUntil - Date.now());
    try {
      const info = await this.t.call<LeaderInfo>(electionOp(this.name, op.leader, op.leaderDefault), this.name);
      if (this.term !== current) return;
      if (info.self.isLeader && info.leader?.token === current.term.token) this.extend(info.self.validUntil);
      else await this.stop(new Lost(`election ${this.name}: this pod no longer leads`));
    } catch {
      // validUntil still bounds the term
    } finally {
      clearTimeout(deadline);
    }
    if (this.term === current) this.schedule();
  }

  /** Applies one event; true after a stepping-down hand-over. */
  async handle(name: string, data: Record<string, unknown>): Promise<boolean> {
    switch (name) {
      case "leader": {
        const info = data as unknown as LeaderInfo;
        this.sawLeader(info.leader);
        const leads = info.self?.isLeader && info.leader;
        if (this.term && (!leads || info.leader?.token !== this.term.term.token)) {
          await this.stop(new Lost(`election ${this.name}: this pod no longer leads`));
        }
        if (leads && !this.term) this.start(info.leader!.token, info.leader!.since, info.self.validUntil);
        else if (leads) this.extend(info.self.validUntil);
        break;
      }
      case "elected": {
        const token = data.token as number;
        if (this.term && this.term.term.token !== token) await this.stop(new Lost(`election ${this.name}: a new term`));
        if (!this.term) this.start(token, data.since as string, data.validUntil as string);
        break;
      }
      case "candidate":
        this.sawLeader(data.leader as Leader | null);
        await this.stop(new Lost(`election ${this.name}: queued again`));
        break;
      case "deposed":
      case "lost":
      case "connected":
        await this.stop(new Lost(`election ${this.name}: ${name}`));
        break;
      case "suspended":
        // Leadership is uncertain while the session is cut off: stop acting now.
        await this.stop(new Suspended(`election ${this.name}`));
        break;
      case "resumed":
        if (!this.term) {
          try {
            const info = await this.t.call<LeaderInfo>(electionOp(this.name, op.leader, op.leaderDefault), this.name);
            if (info.self.isLeader && info.leader) this.start(info.leader.token, info.leader.since, info.self.validUntil);
          } catch {
            // the stream's next events say more
          }
        }
        break;
      case "stepping-down":
        await this.stop(new SteppingDown(`election ${this.name}`));
        // The app has stopped acting as leader: hand over now rather than after the grace.
        try {
          await this.t.call(electionOp(this.name, op.leaderRelease, op.leaderReleaseDefault), this.name);
        } catch {
          // the grace ends it anyway
        }
        return true;
    }
    return false;
  }

  async follow(idleMs: number): Promise<boolean> {
    const streamAbort = new AbortController();
    const stream: EventStream = this.opts.campaign
      ? await this.t.stream(electionOp(this.name, op.leaderCampaign, op.leaderCampaignDefault), this.name, undefined, idleMs, streamAbort.signal)
      : await this.t.stream(electionOp(this.name, op.leader, op.leaderDefault), this.name, { [param.follow]: follow.stream }, idleMs, streamAbort.signal);
    const close = () => stream.close();
    this.opts.signal?.addEventListener("abort", close, { once: true });
    let handedOver = false;
    try {
      for (;;) {
        const event = await stream.next();
        if (!event) return handedOver;
        if (await this.handle(event.name, (event.data ?? {}) as Record<string, unknown>)) handedOver = true;
      }
    } catch (e) {
      if (this.opts.signal?.aborted || handedOver) return handedOver;
      throw e;
    } finally {
      this.opts.signal?.removeEventListener("abort", close);
      stream.close();
    }
  }
}

export async function runLeaderElection(t: Transport, opts: LeaderElectionOptions, idleMs: number): Promise<void> {
  const run = new Run(t, opts);
  let backoff = 100;
  while (!opts.signal?.aborted) {
    let why: unknown;
    try {
      if (await run.follow(idleMs)) {
        await run.stop(new Lost(`election ${opts.election ?? ""}: handed over`));
        return;
      }
    } catch (e) {
      if (e instanceof ShuttingDown) break;
      if (e instanceof BatonError && Math.floor(e.status / 100) === 4 && !(e instanceof CampaignInProgress)) {
        await run.stop(new Lost(`election ${opts.election ?? ""}: ${e.message}`));
        throw e;
      }
      why = e;
    }
    await run.stop(new Lost(`election ${opts.election ?? ""}: the stream ended`, { cause: why }));
    await sleep(backoff, opts.signal);
    backoff = Math.min(backoff * 2, 2000);
  }
  await run.stop(new Released(`election ${opts.election ?? ""}: stopped`));
}
