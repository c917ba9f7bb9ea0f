package dev.baton.sdk;

import java.time.Instant;
import java.util.Map;

/**
 * This pod's side of a lock or semaphore ({@code self} of {@link LockState} and {@link
 * SemaphoreState}): whether it holds it, and until when it may act.
 *
 * @param identity this pod's identity
 * @param holds whether this pod holds the lock or a permit
 * @param token its grant's fencing token; null when it does not hold
 * @param hold stream or lease; null when it does not hold
 * @param mode a lock's: exclusive, read or write; null otherwise
 * @param expiresAt when its lease runs out; null for a stream hold or none
 * @param validUntil until when it may act as the holder without hearing from the ensemble
 * @param state the session's state: CONNECTED, SUSPENDED or LOST
 */
public record OwnHold(
    String identity,
    boolean holds,
    Long token,
    String hold,
    String mode,
    Instant expiresAt,
    Instant validUntil,
    String state) {
  static OwnHold of(Map<String, Object> m) {
    return new OwnHold(
        Json.string(m, "identity"),
        Json.bool(m, "holds"),
        m.get("token") instanceof Number n ? n.longValue() : null,
        Json.string(m, "hold"),
        Json.string(m, "mode"),
        Transport.time(m.get("expiresAt")),
        Transport.time(m.get("validUntil")),
        Json.string(m, "state"));
  }
}
