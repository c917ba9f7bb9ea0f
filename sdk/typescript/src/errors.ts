// Errors: one class per documented error code of the sidecar (DESIGN §2), and why a held
// lock or a term of leadership ended (the reason of its AbortSignal).

/** An error answer of the sidecar: `{"error": {"code", "message"}}` with its HTTP status. Each
 * documented code has its own subclass (`NotGranted`, `StaleToken`, ...) for `instanceof`. */
export class BatonError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
    this.name = code;
  }
}

export class NotGranted extends BatonError {}
export class AlreadyHeld extends BatonError {}
export class AcquireInProgress extends BatonError {}
export class StaleToken extends BatonError {}
export class MissingToken extends BatonError {}
export class InvalidToken extends BatonError {}
export class StreamHold extends BatonError {}
export class TtlWithStream extends BatonError {}
export class InvalidHold extends BatonError {}
export class InvalidMode extends BatonError {}
export class NotHeld extends BatonError {}
export class LockLost extends BatonError {}
export class PermitsMismatch extends BatonError {}
export class MissingPermits extends BatonError {}
export class InvalidPermits extends BatonError {}
export class NotPassed extends BatonError {}
export class PartiesMismatch extends BatonError {}
export class MissingParties extends BatonError {}
export class InvalidParties extends BatonError {}
export class NotLeader extends BatonError {}
export class NoElection extends BatonError {}
export class UnknownElection extends BatonError {}
export class FollowWithWait extends BatonError {}
export class InvalidFollow extends BatonError {}
export class CampaignInProgress extends BatonError {}
export class CandidacyAlways extends BatonError {}
export class NotSteppingDown extends BatonError {}
export class ShuttingDown extends BatonError {}
export class AppUnhealthy extends BatonError {}
export class NotConnected extends BatonError {}
export class SessionSuspended extends BatonError {}
export class SessionLost extends BatonError {}
export class EnsembleError extends BatonError {}
export class NodeVanished extends BatonError {}
export class InvalidName extends BatonError {}
export class InvalidDuration extends BatonError {}
export class InvalidQuery extends BatonError {}
export class UnknownParameter extends BatonError {}
export class DuplicateParameter extends BatonError {}
export class BadBody extends BatonError {}
export class PayloadTooLarge extends BatonError {}
export class NotFound extends BatonError {}
export class MethodNotAllowed extends BatonError {}
export class ProbePortReadOnly extends BatonError {}

/** Each documented error code and its class, one a line in the design's order. */
export const ERRORS: Readonly<Record<string, new (status: number, code: string, message: string) => BatonError>> = {
  NotGranted,
  AlreadyHeld,
  AcquireInProgress,
  StaleToken,
  MissingToken,
  InvalidToken,
  StreamHold,
  TtlWithStream,
  InvalidHold,
  InvalidMode,
  NotHeld,
  LockLost,
  PermitsMismatch,
  MissingPermits,
  InvalidPermits,
  NotPassed,
  PartiesMismatch,
  MissingParties,
  InvalidParties,
  NotLeader,
  NoElection,
  UnknownElection,
  FollowWithWait,
  InvalidFollow,
  CampaignInProgress,
  CandidacyAlways,
  NotSteppingDown,
  ShuttingDown,
  AppUnhealthy,
  NotConnected,
  SessionSuspended,
  SessionLost,
  EnsembleError,
  NodeVanished,
  InvalidName,
  InvalidDuration,
  InvalidQuery,
  UnknownParameter,
  DuplicateParameter,
  BadBody,
  PayloadTooLarge,
  NotFound,
  MethodNotAllowed,
  ProbePortReadOnly,
};

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
