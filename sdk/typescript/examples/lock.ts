// The README's lock example: hold lock db while this process lives, pass its token on.
import { Client } from "../src/index.js";

// --- README ---
await using lock = await new Client().lock("db"); // held by a stream: dies with this process
console.log("holding db with fencing token", lock.token); // lock.signal aborts if it is lost
// --- README ---
