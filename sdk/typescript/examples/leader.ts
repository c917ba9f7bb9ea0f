// The README's leader example: lead while the sidecar says so, stop the moment it does not.
import { Client } from "../src/index.js";

const stop = new AbortController();
process.on("SIGTERM", () => stop.abort());
process.on("SIGINT", () => stop.abort());

// --- README ---
await new Client().runLeaderElection({ signal: stop.signal, onStartedLeading: async (term) => {
  console.log("leading with fencing token", term.token); // do the leader's work until term.signal aborts
  await new Promise((resolve) => term.signal.addEventListener("abort", resolve));
}});
// --- README ---
