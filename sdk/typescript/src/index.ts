// Client of the Baton sidecar's localhost HTTP API (DESIGN §2), on Node's own http: leader
// election like client-go's leaderelection, locks and semaphores held by a stream or a renewed
// lease with their fencing tokens, barriers, groups and the pod's event stream.

export { Client, DISCONNECTED, type ClientOptions, type Holder, type LockState, type Members } from "./client.js";
export * from "./errors.js";
export type { SseEvent } from "./http.js";
export type { Leader, LeaderElectionOptions, LeaderInfo, Term } from "./leader.js";
export { Lock, type Grant, type LockOptions } from "./lock.js";
