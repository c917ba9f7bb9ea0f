// Errors: one class per documented error code of the sidecar (DESIGN §2), generated into
// contract.ts from the API's description and re-exported here, and why a held lock or a term of
// leadership ended (the reason of its AbortSignal).

import { BatonError, ERRORS } from "./contract.js";

export * from "./contract.js";

/** The error of an answer: the code's own class, else BatonError. */
export function errorFromAnswer(status: number, code: string, message: string): BatonError {
  const Class = Object.hasOwn(ERRORS, code) ? ERRORS[code] : BatonError;
  return new Class(status, code, message);
}

/** Why a lock, permit or term ended: the `reason` of its AbortSignal. */
export class Ended extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}
/** The sidecar said the grant or term ended, its stream broke, or a renewal failed. */
export class Lost extends Ended {}
/** validUntil passed without fresher word: nothing promises the grant or term any more. */
export class ValidUntilPassed extends Ended {}
/** Released by the app, or by the sidecar (`released`). */
export class Released extends Ended {}
/** The sidecar's session was cut off: a leader stops acting at once. */
export class Suspended extends Ended {}
/** The sidecar got SIGTERM and hands leadership over. */
export class SteppingDown extends Ended {}
