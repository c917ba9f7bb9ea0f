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

  /** {@code read} or {@code write} (a read/write lock); default exclusive. */
  public LockOptions mode(String mode) {
    this.mode = mode;
    return this;
  }

  /** How long to queue; {@link Duration#ZERO} tries once. Default: as long as it takes. */
  public LockOptions waitFor(Duration wait) {
    this.wait = wait;
    return this;
  }

  /** Try once: NotGranted when held elsewhere. */
  public LockOptions tryOnly() {
    return waitFor(Duration.ZERO);
  }

  /**
   * A lease of this length instead of a stream hold; the client renews it every third of the TTL
   * (sooner when validUntil is nearer) and stops at the first renewal that fails.
   */
  public LockOptions lease(Duration ttl) {
    this.ttl = ttl;
    return this;
  }
}
