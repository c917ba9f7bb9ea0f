package dev.baton.sdk;

import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * A held lock or semaphore permit, released by {@link #close()} (try-with-resources).
 *
 * <p>{@link #lost()} completes the moment the grant is known to have ended: lost, released, a
 * renewal failed, or {@link #validUntil()} passed without fresher word (a hung sidecar); {@link
 * #cause()} says why. Pass {@link #token()} (the fencing token) to what the lock protects.
 */
public final class Lock implements AutoCloseable {
  private final Transport t;
  private final Ops ops;
  private final String name;
  private final String path; // for messages
  private final Grant grant;
  private final long token;
  private final Transport.EventStream stream;
  private final Duration ttl;
  private final CompletableFuture<Ended> lost = new CompletableFuture<>();
  private final Object mu = new Object();
  private Instant validUntil;
  private volatile boolean suspended;
  private final Thread guard;
  private final Thread follower;

  /** The operations on the grants of a lock, or of a semaphore. */
  record Ops(Api.Operation acquire, Api.Operation inspect, Api.Operation release, Api.Operation renew) {}

  static final Ops LOCK = new Ops(Api.OP_LOCK_ACQUIRE, Api.OP_LOCK_INSPECT, Api.OP_LOCK_RELEASE, Api.OP_LOCK_RENEW);
  static final Ops SEMAPHORE =
      new Ops(Api.OP_SEMAPHORE_ACQUIRE, Api.OP_SEMAPHORE_INSPECT, Api.OP_SEMAPHORE_RELEASE, Api.OP_SEMAPHORE_RENEW);

  Lock(Transport t, Ops ops, String name, Grant grant, Transport.EventStream stream, Duration ttl) {
    this.t = t;
    this.ops = ops;
    this.name = name;
    this.path = Transport.path(ops.inspect(), name);
    this.grant = grant;
    this.token = grant.token();
    this.stream = stream;
    this.ttl = ttl;
    Instant until = grant.validUntil();
    this.validUntil = until == null ? Instant.EPOCH : until;
    this.guard = daemon(this::guard, "baton-lock-guard " + path);
    this.follower = stream == null ? null : daemon(this::follow, "baton-lock-stream " + path);
  }

  private static Thread daemon(Runnable r, String name) {
    Thread th = new Thread(r, name);
    th.setDaemon(true);
    th.start();
    return th;
  }

  /** The fencing token of the grant. */
  public long token() {
    return token;
  }

  /** The sidecar's grant as received: the lock or semaphore, mode, hold, token, expiresAt, validUntil. */
  public Grant grant() {
    return grant;
  }

  /** The latest promise: until then the holder may act without fresher word. */
  public Instant validUntil() {
    synchronized (mu) {
      return validUntil;
    }
  }

  /** Whether the sidecar's session is cut off now (the lock stands until validUntil). */
  public boolean suspended() {
    return suspended;
  }

  /** Completes with why the grant ended, the moment it is known. */
  public CompletableFuture<Ended> lost() {
    return lost;
  }

  /** Whether the grant still stands. */
  public boolean isValid() {
    return !lost.isDone();
  }

  /** Why the grant ended, null while it stands. */
  public Ended cause() {
    return lost.getNow(null);
  }

  /** Throws why the grant ended, once it has: call it before each protected step. */
  public void check() throws Ended {
    Ended why = cause();
    if (why != null) throw why;
  }

  /**
   * Releases (DELETE with the token; a stream hold's stream closes too) and stops renewing.
   * Releasing a grant that already ended is not an error.
   */
  @Override
  public void close() throws BatonException, IOException {
    boolean interrupted = false;
    try {
      if (isValid()) {
        try {
          t.call(ops.release(), name, Transport.query(Api.PARAM_TOKEN, Long.toString(token)), Duration.ZERO);
        } catch (BatonException.StaleToken | BatonException.NotHeld gone) {
          // it ended already
        } catch (BatonException | IOException e) {
          // A stream hold is released by closing its stream, whatever the DELETE met.
          if (stream == null) throw e;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    } finally {
      end(new Ended.Released(path));
      try {
        guard.join();
        if (follower != null) follower.join();
      } catch (InterruptedException e) {
        interrupted = true;
      }
      if (interrupted) Thread.currentThread().interrupt();
    }
  }

  private void end(Ended why) {
    if (lost.complete(why) && stream != null) stream.close();
    synchronized (mu) {
      mu.notifyAll();
    }
  }

  private void follow() {
    while (true) {
      Transport.Event ev;
      try {
        ev = stream.next();
      } catch (IOException | IllegalArgumentException e) {
        end(new Ended.Lost(path + ": the hold's stream broke", e));
        return;
      }
      if (ev == null) {
        end(new Ended.Lost(path + ": the sidecar ended the hold's stream", null));
        return;
      }
      switch (ev.name) {
        case "lost":
          end(new Ended.Lost(path + ": " + ev.data.get("reason"), null));
          return;
        case "released":
          end(new Ended.Released(path + ": " + ev.data.get("reason")));
          return;
        case "suspended":
          suspended = true;
          Instant until = Transport.time(ev.data.get("validUntil"));
          synchronized (mu) {
            if (until != null && until.isBefore(validUntil)) validUntil = until;
            mu.notifyAll();
          }
          break;
        case "resumed":
          suspended = false;
          break;
        default:
          break;
      }
    }
  }

  /**
   * Ends the grant at validUntil; keeps validUntil fresh: a lease by renewing it, a stream hold by
   * asking the sidecar whether it still holds it.
   */
  private void guard() {
    while (isValid()) {
      Duration left = Duration.between(Instant.now(), validUntil());
      if (left.isNegative() || left.isZero()) {
        end(new Ended.ValidUntilPassed(path));
        return;
      }
      Duration step = left.dividedBy(3);
      if (ttl != null && ttl.dividedBy(3).compareTo(step) < 0) step = ttl.dividedBy(3);
      long deadline = System.nanoTime() + Math.max(step.toNanos(), 50_000_000L);
      synchronized (mu) {
        long waitNs;
        while (isValid() && (waitNs = deadline - System.nanoTime()) > 0) {
          try {
            mu.wait(Math.max(waitNs / 1_000_000, 1));
          } catch (InterruptedException e) {
            return;
          }
        }
      }
      if (!isValid()) return;
      if (!Instant.now().isBefore(validUntil())) {
        end(new Ended.ValidUntilPassed(path));
        return;
      }
      Instant fresh;
      Duration bound = Duration.between(Instant.now(), validUntil());
      if (bound.isNegative() || bound.isZero()) continue;
      var answer = refresh(bound);
      try {
        // No answer by validUntil: the grant is given up then, not when the call times out.
        fresh = answer.get(bound.toNanos(), java.util.concurrent.TimeUnit.NANOSECONDS);
      } catch (java.util.concurrent.TimeoutException e) {
        answer.cancel(true);
        continue;
      } catch (java.util.concurrent.ExecutionException e) {
        Throwable why = e.getCause() instanceof java.util.concurrent.CompletionException && e.getCause().getCause() != null ? e.getCause().getCause() : e.getCause();
        if (ttl != null) {
          // Never retried: the lease may be gone, and a renew loop outliving its lock is the
          // bug this client exists to prevent.
          end(new Ended.Lost(path + ": renewal failed", why));
          return;
        }
        if (why instanceof BatonException && ((BatonException) why).status() / 100 == 4) {
          end(new Ended.Lost(path + ": " + why.getMessage(), why));
          return;
        }
        continue; // a stream hold: its stream says when it ends; validUntil bounds it
      } catch (InterruptedException e) {
        return;
      }
      synchronized (mu) {
        if (fresh != null && fresh.isAfter(validUntil) && (ttl != null || !suspended)) validUntil = fresh;
      }
    }
  }

  private java.util.concurrent.CompletableFuture<Instant> refresh(Duration bound) {
    String tokenText = Long.toString(token);
    if (ttl != null) {
      return t.callAsync(ops.renew(), name, Transport.query(Api.PARAM_TOKEN, tokenText), bound)
          .thenApply(g -> Transport.time(g.get("validUntil")));
    }
    return t.callAsync(ops.inspect(), name, null, bound)
        .thenApply(
            state -> {
              Map<String, Object> me = Json.object(state, "self");
              if (!Json.bool(me, "holds") || Json.number(me, "token") != token) {
                throw new java.util.concurrent.CompletionException(
                    new BatonException.NotHeld(409, "NotHeld", "the sidecar no longer holds this grant"));
              }
              return Transport.time(me.get("validUntil"));
            });
  }
}
