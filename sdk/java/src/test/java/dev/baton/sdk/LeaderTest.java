package dev.baton.sdk;

import static dev.baton.sdk.Harness.BOUND;
import static dev.baton.sdk.Harness.env;
import static dev.baton.sdk.Harness.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.baton.sdk.Harness.Proxy;
import dev.baton.sdk.Harness.Sidecar;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class LeaderTest {
  /** Terms a selector's work saw, in order; each leads until its term ends. */
  static final class Work implements LeaderSelectorListener {
    final BlockingQueue<Term> started = new LinkedBlockingQueue<>();
    final BlockingQueue<Boolean> interrupted = new LinkedBlockingQueue<>();

    @Override
    public void takeLeadership(Term term) {
      started.add(term);
      try {
        term.ended().get(); // an app that leads until told to stop
      } catch (InterruptedException e) {
        interrupted.add(true);
      } catch (java.util.concurrent.ExecutionException e) {
        throw new AssertionError(e);
      }
    }

    Term next() throws InterruptedException {
      Term t = started.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS);
      assertNotNull(t, "never started leading");
      return t;
    }
  }

  /**
   * Long-polls until identity leads election (a hand-over may pass through a moment with no
   * leader, which a single long-poll would answer).
   */
  static LeaderInfo waitLeader(BatonClient c, String election, String identity) throws Exception {
    long until = System.nanoTime() + BOUND.toNanos();
    long token = 0;
    while (System.nanoTime() < until) {
      LeaderInfo info = c.waitLeaderChange(election, token, BOUND);
      if (info.leader() != null && info.leader().identity().equals(identity)) return info;
      token = info.leader() == null ? 0 : info.leader().token();
    }
    throw new AssertionError(identity + " never led " + election);
  }

  static Ended ended(Term term) throws Exception {
    return term.ended().get(BOUND.toMillis(), TimeUnit.MILLISECONDS);
  }

  @Test
  void selectorRunsTheLeaderAndInterruptsItWhenDeposed() throws Exception {
    String election = unique("election");
    try (Sidecar a = new Sidecar(null, unique("a"), List.of(election))) {
      Work work = new Work();
      try (LeaderSelector selector = new BatonClient(a.addr).leaderSelector(election, work).start()) {
        Term term = work.next();
        try (Sidecar b = new Sidecar(null, unique("b"), List.of(election))) {
          LeaderInfo seen = waitLeader(new BatonClient(b.addr), election, a.identity);
          assertEquals(a.identity, seen.leader().identity());
          assertEquals(term.token(), seen.leader().token());
          new BatonClient(a.addr).resign(election); // behind the app's back
          assertInstanceOf(Ended.Lost.class, ended(term));
          waitLeader(new BatonClient(b.addr), election, b.identity);
        }
      }
    }
  }

  @Test
  void latchAwaitsLeadershipAndTellsItsListeners() throws Exception {
    String election = unique("latch");
    try (Sidecar a = new Sidecar(null, unique("a"), List.of(election));
        LeaderLatch latch = new BatonClient(a.addr).leaderLatch(election)) {
      BlockingQueue<String> told = new LinkedBlockingQueue<>();
      latch.addListener(
          new LeaderLatch.Listener() {
            @Override
            public void isLeader(Term term) {
              told.add("isLeader");
            }

            @Override
            public void notLeader(Term term) {
              told.add("notLeader");
            }
          });
      latch.start();
      Term term = latch.await(BOUND);
      assertNotNull(term);
      assertTrue(latch.hasLeadership());
      assertEquals("isLeader", told.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS));
      new BatonClient(a.addr).resign(election);
      assertInstanceOf(Ended.Lost.class, ended(term));
      assertEquals("notLeader", told.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS));
    }
  }

  /**
   * SIGTERM while the app leads: the selector ends the term (interrupting the work), releases the
   * election, and the other pod leads at once, long before the sidecar's 5 m --release-grace.
   */
  @Test
  void sigtermHandsLeadershipOver() throws Exception {
    String election = unique("handoff");
    try (Sidecar a = new Sidecar(null, unique("a"), List.of(election), "--release-grace", "5m")) {
      Work work = new Work();
      try (LeaderSelector selector = new BatonClient(a.addr).leaderSelector(election, work).start()) {
        Term term = work.next();
        try (Sidecar b = new Sidecar(null, unique("b"), List.of(election))) {
          a.signal("TERM");
          waitLeader(new BatonClient(b.addr), election, b.identity);
          CompletableFuture.runAsync(
                  () -> {
                    try {
                      selector.join();
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                    }
                  })
              .get(BOUND.toMillis(), TimeUnit.MILLISECONDS);
          assertTrue(selector.handedOver());
          // The last term is the one stepping-down ended (the sidecar may have said "not
          // leading, leading again" in between: that ends a term and starts one with the same token).
          Term last = term;
          for (Term t = work.started.poll(); t != null; t = work.started.poll()) last = t;
          assertInstanceOf(Ended.SteppingDown.class, last.cause());
          assertEquals(0, a.waitExit());
          a.waitLog("the app released the election");
        }
      }
    }
  }

  /**
   * The session is cut off from the ensemble: the term ends at once (Suspended), the event stream
   * says SUSPENDED, and once the link heals the same session leads again with the same token.
   */
  @Test
  void suspendedSessionStopsTheLeaderUntilItResumes() throws Exception {
    String election = unique("suspend");
    try (Proxy link = new Proxy(env("BATON_SDK_ENSEMBLE"));
        Sidecar a = new Sidecar(link.addr, unique("a"), List.of(election))) {
      BatonClient client = new BatonClient(a.addr);
      BlockingQueue<String> states = new LinkedBlockingQueue<>();
      Work work = new Work();
      try (AutoCloseable events =
              client.events(
                  e -> {
                    if (e.name().equals("state")) states.add(String.valueOf(e.data().get("state")));
                  });
          LeaderSelector selector = client.leaderSelector(election, work).start()) {
        assertEquals("CONNECTED", states.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS));
        Term term = work.next();
        link.setCut(true);
        Ended why = ended(term);
        assertTrue(why instanceof Ended.Suspended || why instanceof Ended.Lost, why.toString());
        String state;
        do {
          state = states.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS);
          assertNotNull(state, "no SUSPENDED state event");
        } while (!state.equals("SUSPENDED"));
        link.setCut(false);
        assertEquals(term.token(), work.next().token(), "the resumed session leads on with the same token");
      }
    }
  }

  @Test
  void campaignStandsWhileItRuns() throws Exception {
    String election = unique("campaign");
    try (Sidecar a = new Sidecar(null, unique("a"), List.of(election), "--candidacy", "app");
        Sidecar b = new Sidecar(null, unique("b"), List.of(election))) {
      waitLeader(new BatonClient(b.addr), election, b.identity);
      Work work = new Work();
      Term term;
      try (LeaderSelector campaign = new BatonClient(a.addr).campaign(election, work).start()) {
        Members m = new BatonClient(b.addr).members(election);
        while (m.members().size() < 2) m = new BatonClient(b.addr).waitMembers(election, m.version(), BOUND);
        new BatonClient(b.addr).resign(election);
        term = work.next();
      }
      assertTrue(!term.isValid());
      waitLeader(new BatonClient(b.addr), election, b.identity);
    }
  }

  @Test
  void membersAndBarrier() throws Exception {
    String election = unique("group");
    try (Sidecar a = new Sidecar(null, unique("a"), List.of(election));
        Sidecar b = new Sidecar(null, unique("b"), List.of(election))) {
      Members m = new BatonClient(a.addr).members(election);
      while (m.members().size() < 2) m = new BatonClient(a.addr).waitMembers(election, m.version(), BOUND);
      // Queue order is creation order, and both sidecars start their candidacy at once.
      assertEquals(
          java.util.Set.of(a.identity, b.identity),
          java.util.Set.of(m.members().get(0).identity(), m.members().get(1).identity()));
      assertTrue(m.members().get(0).leader() && !m.members().get(1).leader());
      String name = unique("barrier");
      CompletableFuture<Void> other =
          CompletableFuture.runAsync(
              () -> {
                try {
                  new BatonClient(b.addr).barrier(name, 2, BOUND);
                } catch (Exception e) {
                  throw new RuntimeException(e);
                }
              });
      new BatonClient(a.addr).barrier(name, 2, BOUND);
      other.get(BOUND.toMillis(), TimeUnit.MILLISECONDS);
      assertThrows(BatonException.NotPassed.class, () -> new BatonClient(a.addr).barrier(unique("alone"), 2, java.time.Duration.ZERO));
    }
  }

  @Test
  void againstApacheZooKeeper() throws Exception {
    String election = unique("zk");
    try (Sidecar a = new Sidecar(env("BATON_SDK_ZOOKEEPER"), unique("a"), List.of(election))) {
      BatonClient client = new BatonClient(a.addr);
      Work work = new Work();
      try (LeaderSelector selector = client.leaderSelector(election, work).start()) {
        Term term = work.next();
        Lock held = client.lock(unique("lock"));
        assertTrue(held.token() > term.token(), "tokens are czxids");
        a.signal("KILL");
        assertInstanceOf(Ended.Lost.class, LockTest.lost(held));
        assertNotNull(ended(term));
      }
    }
  }
  /**
   * The pod's event stream outlives its sidecar: when the sidecar dies the client says so
   * (disconnected: stop acting), and when a sidecar serves the address again the stream is
   * reopened and starts with the current state.
   */
  @Test
  void eventsReconnectAfterTheSidecarRestarts() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      BlockingQueue<BatonClient.Event> events = new LinkedBlockingQueue<>();
      try (AutoCloseable following = new BatonClient(s.addr).events(events::add)) {
        java.util.function.Predicate<BatonClient.Event> connected =
            e -> e.name().equals("state") && "CONNECTED".equals(e.data().get("state"));
        next(events, connected);
        s.signal("KILL");
        BatonClient.Event gone = next(events, e -> e.name().equals(BatonClient.DISCONNECTED));
        assertNotNull(gone.data().get("error"));
        try (Sidecar again = new Sidecar(null, unique("a"), List.of(), "--listen", s.addr)) {
          next(events, connected);
        }
      }
    }
  }

  private static BatonClient.Event next(BlockingQueue<BatonClient.Event> events, java.util.function.Predicate<BatonClient.Event> want)
      throws InterruptedException {
    while (true) {
      BatonClient.Event e = events.poll(BOUND.toMillis(), TimeUnit.MILLISECONDS);
      assertNotNull(e, "no such event");
      if (want.test(e)) return e;
    }
  }
}
