package dev.baton.sdk;

import java.time.Instant;
import java.util.Map;

/**
 * The sidecar's answer to an acquire ({@link Lock#grant()}): what is held, its fencing token, and
 * until when the holder may act without fresher word. A lock's names the {@code lock} (and its
 * {@code mode}: exclusive, read, write); a permit's names the {@code semaphore} and its {@code
 * permits}, with mode {@code permit}.
 *
 * @param lock the lock's name; null for a permit
 * @param semaphore the semaphore's name; null for a lock
 * @param permits the semaphore's number of permits; null for a lock
 * @param mode exclusive, read, write or permit
 * @param token the fencing token: pass it to what the lock protects
 * @param hold stream or lease
 * @param expiresAt when the lease runs out; null for a stream hold
 * @param validUntil until when this pod may act as the holder without hearing from the ensemble
 */
public record Grant(
    String lock,
    String semaphore,
    Integer permits,
    String mode,
    long token,
    String hold,
    Instant expiresAt,
    Instant validUntil) {
  static Grant of(Map<String, Object> m) {
    return new Grant(
        Json.string(m, "lock"),
        Json.string(m, "semaphore"),
        Json.integer(m, "permits"),
        Json.string(m, "mode"),
        Json.number(m, "token"),
        Json.string(m, "hold"),
        Transport.time(m.get("expiresAt")),
        Transport.time(m.get("validUntil")));
  }
}
