// HTTP to the sidecar with node:http (no request or body timeouts of its own: a lock's wait may
// be long), plain calls and text/event-stream answers read with an idle timeout (the sidecar
// sends `: keep-alive` every 10 s, so a longer silence is a hung sidecar or a cut connection).

import * as http from "node:http";
import api from "./contract.js";
import { BatonError, errorFromAnswer } from "./errors.js";

/** How far beyond the wait a call may go before it is taken as hung. */
export const CALL_SLACK_MS = 10_000;

/** One operation of the API (contract.ts): its method, and its path with `{name}`. */
export interface Operation {
  readonly method: string;
  readonly path: string;
}

/** A query: only the API's parameters (contract.ts), so tsc refuses a name it does not take. */
export type Query = { [K in (typeof api.param)[keyof typeof api.param]]?: string | number | undefined };

/** The operation's path for `name` (an election, lock, semaphore or barrier name). */
export function pathOf(op: Operation, name: string): string {
  return op.path.replace("{name}", encodeURIComponent(name));
}

export function duration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${Math.round(ms)}ms`;
}

/** An RFC 3339 instant in ms since the epoch; undefined for null. */
export function parseTime(value: unknown): number | undefined {
  if (typeof value !== "string" || value === "") return undefined;
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : t;
}

function decodeError(status: number, body: string): BatonError {
  try {
    const parsed = JSON.parse(body) as { error?: { code?: string; message?: string } };
    if (parsed.error?.code) return errorFromAnswer(status, parsed.error.code, parsed.error.message ?? "");
  } catch {
    // not the error envelope
  }
  return new BatonError(status, String(status), body.trim());
}

export interface SseEvent {
  name: string;
  data: unknown;
}

export class Transport {
  private readonly agent = new http.Agent({ keepAlive: true });

  constructor(
    readonly host: string,
    readonly port: number,
  ) {}

  private path(op: Operation, name: string, query?: Query): string {
    const path = pathOf(op, name);
    if (!query) return path;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
    const s = q.toString();
    return s ? `${path}?${s}` : path;
  }

  /** One request of `op` for `name`; the 2xx answer's JSON, or the code's error class thrown. */
  call<T = unknown>(op: Operation, name: string, query?: Query, waitMs = 0, signal?: AbortSignal): Promise<T> {
    const { method } = op;
    const path = pathOf(op, name);
    return new Promise<T>((resolve, reject) => {
      const req = http.request(
        { host: this.host, port: this.port, method, path: this.path(op, name, query), agent: this.agent, signal },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => (body += chunk));
          res.on("error", reject);
          res.on("end", () => {
            clearTimeout(timer);
            const status = res.statusCode ?? 0;
            if (Math.floor(status / 100) !== 2) return reject(decodeError(status, body));
            try {
              resolve((body ? JSON.parse(body) : undefined) as T);
            } catch (e) {
              reject(e);
            }
          });
        },
      );
      const timer = setTimeout(
        () => req.destroy(new Error(`${method} ${path}: no answer within ${waitMs + CALL_SLACK_MS} ms`)),
        waitMs + CALL_SLACK_MS,
      );
      req.on("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
      req.end();
    });
  }

  /** Opens the event stream of `op` for `name`; a refusal before it starts rejects with the
   * code's error class. */
  stream(op: Operation, name: string, query: Query | undefined, idleMs: number, signal?: AbortSignal): Promise<EventStream> {
    const { method } = op;
    const path = pathOf(op, name);
    return new Promise<EventStream>((resolve, reject) => {
      // Its own connection: closing the stream must close the socket (that ends a hold).
      const req = http.request({ host: this.host, port: this.port, method, path: this.path(op, name, query), agent: false, signal, headers: { accept: "text/event-stream" } });
      req.on("response", (res) => {
        const status = res.statusCode ?? 0;
        if (Math.floor(status / 100) !== 2) {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => (body += c));
          res.on("end", () => reject(decodeError(status, body)));
          res.on("error", reject);
          return;
        }
        if (!String(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
          req.destroy();
          return reject(new BatonError(status, "NotAStream", `${path} answered ${res.headers["content-type"]}`));
        }
        resolve(new EventStream(req, res, idleMs));
      });
      req.on("error", reject);
      req.end();
    });
  }
}

/** A text/event-stream being read: `next()` resolves to each event, null when the sidecar ended
 * the stream, and rejects when it broke or fell silent for idleMs. */
export class EventStream {
  private buffer = "";
  private name = "";
  private data: string[] = [];
  private readonly queue: SseEvent[] = [];
  private waiting: { resolve: (e: SseEvent | null) => void; reject: (e: unknown) => void } | undefined;
  private ended = false;
  private failure: unknown;
  private idle: NodeJS.Timeout;

  constructor(
    private readonly req: http.ClientRequest,
    res: http.IncomingMessage,
    idleMs: number,
  ) {
    res.setEncoding("utf8");
    this.idle = setTimeout(() => this.fail(new Error("the stream fell silent (no keep-alive)")), idleMs);
    res.on("data", (chunk: string) => this.feed(chunk));
    res.on("end", () => this.finish());
    res.on("error", (e) => this.fail(e));
    res.on("close", () => this.finish(new Error("the stream's connection closed")));
  }

  private feed(chunk: string): void {
    this.idle.refresh();
    this.buffer += chunk;
    let at: number;
    while ((at = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, at).replace(/\r$/, "");
      this.buffer = this.buffer.slice(at + 1);
      if (line === "") {
        if (this.name || this.data.length) {
          const text = this.data.join("\n");
          let data: unknown = text;
          try {
            data = text ? JSON.parse(text) : null;
          } catch {
            // kept as text
          }
          this.push({ name: this.name || "message", data });
        }
        this.name = "";
        this.data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") this.name = value;
        else if (field === "data") this.data.push(value);
      }
    }
  }

  private push(event: SseEvent): void {
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve(event);
    } else {
      this.queue.push(event);
    }
  }

  private finish(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    clearTimeout(this.idle);
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      if (error === undefined) w.resolve(null);
      else w.reject(error);
    }
  }

  private fail(error: unknown): void {
    this.finish(error);
    this.req.destroy();
  }

  next(): Promise<SseEvent | null> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    if (this.ended) return this.failure === undefined ? Promise.resolve(null) : Promise.reject(this.failure);
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  close(): void {
    this.fail(new Error("the stream was closed"));
  }
}
