package dev.baton.sdk;

import static dev.baton.sdk.Harness.BOUND;
import static dev.baton.sdk.Harness.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.baton.sdk.Harness.Sidecar;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class LockTest {
  /** Waits (bounded) for the grant to end; why it did. */
  static Ended lost(Lock lock) throws Exception {
    return lock.lost().get(BOUND.toMillis(), TimeUnit.MILLISECONDS);
  }

  @Test
  void waitLimitInspectionReleaseByTokenAndInterrupt() throws Exception {
    String name = unique("lock");
    assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().waitFor(Duration.ofSeconds(601)));
    assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().waitFor(Duration.ofSeconds(-1)));
    // A lease is 100 ms to 24 h.
    assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().lease(Duration.ofMillis(50)));
    assertThrows(IllegalArgumentException.class, () -> LockOptions.defaults().lease(Duration.ofHours(25)));
    try (Sidecar sa = new Sidecar(null, unique("a"), List.of());
        Sidecar sb = new Sidecar(null, unique("b"), List.of())) {
      BatonClient a = new BatonClient(sa.addr);
      BatonClient b = new BatonClient(sb.addr);
      assertTrue(a.healthy());
      try (Lock permit = a.semaphore(name, 2, LockOptions.defaults().lease(Duration.ofSeconds(30)))) {
        SemaphoreState state = a.semaphoreState(name);
        assertEquals(name, state.semaphore());
        assertEquals(2, state.permits());
        assertTrue(state.self().holds());
        assertEquals(permit.token(), state.self().token());
        assertEquals("lease", state.self().hold());
        assertEquals("CONNECTED", state.self().state());
        assertEquals(List.of(permit.token()), state.holders().stream().map(Holder::token).toList());
        assertEquals(2, state.holders().get(0).permits());
        assertTrue(state.waiters().isEmpty());
        a.releaseSemaphore(name, permit.token());
        OwnHold after = a.semaphoreState(name).self();
        assertFalse(after.holds());
        assertNull(after.token());
      }
      for (LockOptions options : List.of(LockOptions.defaults(), LockOptions.defaults().lease(Duration.ofSeconds(30)))) {
        try (Lock held = a.tryLock(name, options)) {
          CompletableFuture<Throwable> failed = new CompletableFuture<>();
          Thread waiter =
              new Thread(
                  () -> {
                    try {
                      b.lock(name, options).close();
                      failed.complete(null);
                    } catch (Exception e) {
                      failed.complete(e);
                    }
                  });
          waiter.start();
          while (a.lockState(name).waiters().isEmpty()) Thread.sleep(20);
          LockState state = a.lockState(name);
          assertEquals(name, state.lock());
          assertEquals(held.token(), state.holder().token());
          assertEquals("exclusive", state.holder().mode());
          assertTrue(state.self().holds());
          assertEquals(held.token(), state.self().token());
          assertNull(state.waiters().get(0).leaseExpiresAt());
          waiter.interrupt();
          assertInstanceOf(InterruptedException.class, failed.get(BOUND.toMillis(), TimeUnit.MILLISECONDS));
          assertFalse(held.lost().isDone());
        }
      }
    }
  }

  @Test
  void streamHoldIsExclusiveAndReleasedByTryWithResources() throws Exception {
    String name = unique("lock");
    try (Sidecar sa = new Sidecar(null, unique("a"), List.of());
        Sidecar sb = new Sidecar(null, unique("b"), List.of())) {
      BatonClient a = new BatonClient(sa.addr);
      BatonClient b = new BatonClient(sb.addr);
      Lock first;
      CompletableFuture<Lock> waiter;
      try (Lock held = a.lock(name)) {
        first = held;
        assertEquals("stream", held.grant().hold());
        assertEquals(name, held.grant().lock());
        assertEquals("exclusive", held.grant().mode());
        assertEquals(held.token(), held.grant().token());
        assertNull(held.grant().expiresAt());
        assertNull(held.grant().semaphore());
        assertTrue(held.token() > 0);
        BatonException.NotGranted refused =
            assertThrows(BatonException.NotGranted.class, () -> b.tryLock(name));
        assertEquals(409, refused.status());
        assertThrows(BatonException.AlreadyHeld.class, () -> a.lock(name, LockOptions.defaults().tryOnly()));
        waiter =
            CompletableFuture.supplyAsync(
                () -> {
                  try {
                    return b.lock(name, LockOptions.defaults().waitFor(BOUND));
                  } catch (Exception e) {
                    throw new RuntimeException(e);
                  }
                });
        // Polled: no event says a pod queued.
        while (a.lockState(name).waiters().isEmpty()) Thread.sleep(20);
      }
      assertInstanceOf(Ended.Released.class, first.cause());
      try (Lock second = waiter.get(BOUND.toMillis(), TimeUnit.MILLISECONDS)) {
        assertTrue(second.token() > first.token(), "the fencing token grows");
      }
    }
  }

  @Test
  void killedSidecarEndsTheStreamHoldWithinValidUntil() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      Lock held = new BatonClient(s.addr).lock(unique("lock"));
      Instant validUntil = held.validUntil();
      s.signal("KILL");
      assertInstanceOf(Ended.Lost.class, lost(held));
      assertFalse(Instant.now().isAfter(validUntil), "learnt of the loss after validUntil");
    }
  }

  @Test
  void hungSidecarEndsTheHoldAtValidUntil() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      Lock held = new BatonClient(s.addr).lock(unique("lock"));
      s.signal("STOP");
      try {
        assertInstanceOf(Ended.ValidUntilPassed.class, lost(held));
        assertFalse(Instant.now().isBefore(held.validUntil()));
        assertThrows(Ended.ValidUntilPassed.class, held::check);
      } finally {
        s.signal("CONT");
      }
    }
  }

  @Test
  void leaseEndsAtTheFirstFailedRenewal() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      BatonClient client = new BatonClient(s.addr);
      String name = unique("lease");
      Lock held = client.lock(name, LockOptions.defaults().lease(Duration.ofSeconds(3)));
      assertEquals("lease", held.grant().hold());
      assertTrue(held.grant().expiresAt() != null);
      Thread.sleep(4000); // renewals keep it past its TTL
      assertTrue(held.isValid(), "a renewed lease ended");
      client.releaseLock(name, held.token()); // behind the Lock's back
      Ended why = lost(held);
      assertInstanceOf(Ended.Lost.class, why);
      assertInstanceOf(BatonException.NotHeld.class, why.getCause());
      long renewals = s.count("/renew status=");
      Thread.sleep(2500); // two more renewals (every second) had the loop gone on
      assertEquals(renewals, s.count("/renew status="), "renewals went on after the failure");
    }
  }

  @Test
  void killedSidecarEndsTheLease() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      Lock held = new BatonClient(s.addr).lock(unique("lease"), LockOptions.defaults().lease(Duration.ofSeconds(30)));
      Instant validUntil = held.validUntil();
      s.signal("KILL");
      assertInstanceOf(Ended.Lost.class, lost(held));
      assertFalse(Instant.now().isAfter(validUntil));
    }
  }

  @Test
  void semaphorePermits() throws Exception {
    String name = unique("sem");
    try (Sidecar p1 = new Sidecar(null, unique("p"), List.of());
        Sidecar p2 = new Sidecar(null, unique("p"), List.of());
        Sidecar p3 = new Sidecar(null, unique("p"), List.of())) {
      Lock one = new BatonClient(p1.addr).semaphore(name, 2, LockOptions.defaults());
      Lock two = new BatonClient(p2.addr).semaphore(name, 2, LockOptions.defaults());
      assertEquals(name, one.grant().semaphore());
      assertEquals(2, one.grant().permits());
      assertEquals("permit", one.grant().mode());
      assertNull(one.grant().lock());
      BatonClient third = new BatonClient(p3.addr);
      assertThrows(BatonException.NotGranted.class, () -> third.semaphore(name, 2, LockOptions.defaults().tryOnly()));
      assertThrows(BatonException.InvalidPermits.class, () -> third.semaphore(name, 0, LockOptions.defaults()));
      one.close();
      try (Lock l = third.semaphore(name, 2, LockOptions.defaults().waitFor(BOUND))) {
        assertTrue(l.isValid());
      }
      two.close();
    }
  }
  /** The app's connection to its sidecar is cut: the holder learns at once, the sidecar releases. */
  @Test
  void cutAppConnectionEndsTheHoldOnBothSides() throws Exception {
    // Another pod takes it after (this one's release of the closed stream is on its way).
    try (Sidecar s = new Sidecar(null, unique("a"), List.of());
        Sidecar other = new Sidecar(null, unique("b"), List.of());
        Harness.Proxy link = new Harness.Proxy(s.addr)) {
      String name = unique("lock");
      Lock held = new BatonClient(link.addr).lock(name);
      Instant validUntil = held.validUntil();
      link.setCut(true);
      assertInstanceOf(Ended.Lost.class, lost(held));
      assertFalse(Instant.now().isAfter(validUntil), "learnt of the loss after validUntil");
      try (Lock after = new BatonClient(other.addr).lock(name, LockOptions.defaults().waitFor(BOUND))) {
        assertTrue(after.token() > held.token());
      }
    }
  }
}
