// Real baton-sidecar processes on the ensembles sdk/test.sh started (sdk/testenv.sh), and a TCP
// proxy that cuts a sidecar off from its ensemble.

import { spawn, type ChildProcess } from "node:child_process";
import * as net from "node:net";
import { createInterface } from "node:readline";
import type { TestContext } from "node:test";

/** How long any one wait in these tests may take before the test fails. */
export const BOUND_MS = 60_000;

export function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests with sdk/test.sh, which starts the ensembles`);
  return value;
}

let counter = 0;
/** A name no other test or earlier run uses (the ensembles are shared). */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now() % 1_000_000_000}-${counter++}`;
}

/** Rejects after BOUND_MS with `what`. */
export function bounded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${BOUND_MS} ms`)), BOUND_MS))),
  ]);
}

/** Resolves with the signal's reason once it aborts (bounded). */
export function aborted(signal: AbortSignal, what = "still held: the client never learnt it lost it"): Promise<unknown> {
  return bounded(
    new Promise((resolve) => {
      if (signal.aborted) resolve(signal.reason);
      else signal.addEventListener("abort", () => resolve(signal.reason), { once: true });
    }),
    what,
  );
}

export class Sidecar {
  readonly lines: string[] = [];
  addr = "";
  private readonly proc: ChildProcess;
  private readonly watchers = new Set<() => void>();
  exit: Promise<number | null>;

  private constructor(
    readonly identity: string,
    args: string[],
  ) {
    this.proc = spawn(env("BATON_SIDECAR_BIN"), args, {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, BATON_LOG: "info,baton_sidecar=debug" },
    });
    this.exit = new Promise((resolve) => this.proc.on("exit", (code) => (this.wake(), resolve(code))));
    createInterface({ input: this.proc.stderr! }).on("line", (line) => {
      this.lines.push(line);
      this.wake();
    });
  }

  private wake(): void {
    for (const w of this.watchers) w();
  }

  /** Starts a sidecar on `ensemble` (BATON_SDK_ENSEMBLE when undefined) and waits until it
   * serves HTTP and has a session; it is killed when the test ends. */
  static async start(t: TestContext, ensemble: string | undefined, identity: string, elections: string[] = [], ...extra: string[]): Promise<Sidecar> {
    let listen = "127.0.0.1:0";
    const at = extra.indexOf("--listen");
    if (at >= 0) {
      listen = extra[at + 1];
      extra = [...extra.slice(0, at), ...extra.slice(at + 2)];
    }
    const args = ["--ensemble", ensemble ?? env("BATON_SDK_ENSEMBLE"), "--listen", listen, "--identity", identity];
    if (!extra.includes("--session-timeout")) args.push("--session-timeout", "10s");
    for (const e of elections) args.push("--election", e);
    const s = new Sidecar(identity, [...args, ...extra]);
    t.after(() => s.kill());
    const line = await s.waitLog("serving the HTTP API");
    s.addr = line.split(/\s+/).find((w) => w.startsWith("addr="))!.slice(5);
    await s.waitLog("recipe::session: session established");
    return s;
  }

  /** Waits (on the log as it is written) for a line containing `needle`. */
  waitLog(needle: string): Promise<string> {
    return bounded(
      new Promise<string>((resolve, reject) => {
        const look = () => {
          const found = this.lines.find((l) => l.includes(needle));
          if (found !== undefined) {
            this.watchers.delete(look);
            resolve(found);
          } else if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
            this.watchers.delete(look);
            reject(new Error(`${this.identity} exited without ${needle}:\n${this.lines.join("\n")}`));
          }
        };
        this.watchers.add(look);
        look();
      }),
      `${this.identity}: a log line with ${needle}`,
    );
  }

  signal(sig: NodeJS.Signals): void {
    this.proc.kill(sig);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGCONT");
      this.proc.kill("SIGKILL");
    }
    await this.exit;
  }
}

/** Forwards a local port to target until cut: then every connection closes and new ones are
 * refused, as a network partition between a sidecar and its ensemble would. */
export class Proxy {
  addr = "";
  private cut = false;
  private readonly sockets = new Set<net.Socket>();
  private readonly server: net.Server;

  private constructor(target: string) {
    const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
    this.server = net.createServer((client) => {
      if (this.cut) {
        client.destroy();
        return;
      }
      const upstream = net.connect(port, host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
  }

  static async start(t: TestContext, target: string): Promise<Proxy> {
    const p = new Proxy(target);
    await new Promise<void>((resolve) => p.server.listen(0, "127.0.0.1", resolve));
    p.addr = `127.0.0.1:${(p.server.address() as net.AddressInfo).port}`;
    t.after(() => {
      p.setCut(true);
      p.server.close();
    });
    return p;
  }

  setCut(cut: boolean): void {
    this.cut = cut;
    if (cut) for (const s of this.sockets) s.destroy();
  }
}
