package dev.baton.sdk;

import java.time.Duration;

/**
 * How to acquire a lock or permit. The default: exclusive, held by a stream (it dies with the
 * process), waiting as long as it takes.
 */
public final class LockOptions {
  String mode;
  Duration wait;
  Duration ttl;

  /** The defaults. */
  public static LockOptions defaults() {
    return new LockOptions();
  }

  /** A copy with wait 0 (try once), leaving these options as they are. */
  LockOptions tryOnlyCopy() {
    LockOptions copy = new LockOptions();
    copy.mode = mode;
    copy.ttl = ttl;
    copy.wait = Duration.ZERO;
    return copy;
  }

  /** {@code read} or {@code write} (a read/write lock); default exclusive. */
  public LockOptions mode(String mode) {
    this.mode = mode;
    return this;
  }

  /**
   * How long to queue: {@link Duration#ZERO} tries once (NotGranted when held elsewhere), at most
   * 600 s (NotGranted after). Default (null): until granted or the thread is interrupted, in
   * calls of at most 600 s.
   *
   * @throws IllegalArgumentException if wait is negative or above the sidecar's 600 s limit
   */
  public LockOptions waitFor(Duration wait) {
    if (wait != null && (wait.compareTo(Api.WAIT_MIN) < 0 || wait.compareTo(BatonClient.MAX_WAIT) > 0)) {
      throw new IllegalArgumentException(
          "wait " + wait + ": " + Api.WAIT_MIN + " (try once) to " + BatonClient.MAX_WAIT
              + ", or null to wait until granted or interrupted");
    }
    this.wait = wait;
    return this;
  }

  /** Try once: NotGranted when held elsewhere. */
  public LockOptions tryOnly() {
    return waitFor(Duration.ZERO);
  }

  /**
   * A lease of this length instead of a stream hold; the client renews it every third of the TTL
   * (sooner when validUntil is nearer) and stops at the first renewal that fails. Null: a stream
   * hold.
   *
   * @throws IllegalArgumentException if ttl is outside the sidecar's bounds, 100 ms to 24 h
   */
  public LockOptions lease(Duration ttl) {
    if (ttl != null && (ttl.compareTo(Api.TTL_MIN) < 0 || ttl.compareTo(Api.TTL_MAX) > 0)) {
      throw new IllegalArgumentException("ttl " + ttl + ": a lease is " + Api.TTL_MIN + " to " + Api.TTL_MAX);
    }
    this.ttl = ttl;
    return this;
  }
}
