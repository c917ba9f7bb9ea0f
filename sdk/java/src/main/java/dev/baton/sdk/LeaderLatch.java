package dev.baton.sdk;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Leadership like Curator's LeaderLatch: {@link #hasLeadership()}, {@link #await(Duration)} and
 * listeners told when this pod starts and stops leading. {@link #currentTerm()} carries the
 * fencing token and ends the moment leadership may no longer be assumed.
 */
public final class LeaderLatch implements AutoCloseable {
  /** Told on each change, as Curator's LeaderLatchListener. */
  public interface Listener {
    void isLeader(Term term);

    void notLeader(Term term);
  }

  private final LeaderElection loop;
  private final Thread thread;
  private final List<Listener> listeners = new CopyOnWriteArrayList<>();
  private volatile Term term;

  LeaderLatch(Transport t, String election, boolean campaign, Duration idle) {
    this.loop =
        new LeaderElection(
            t,
            election,
            campaign,
            idle,
            new LeaderElection.Listener() {
              @Override
              public void started(Term started) {
                synchronized (LeaderLatch.this) {
                  term = started;
                  LeaderLatch.this.notifyAll();
                }
                for (Listener l : listeners) l.isLeader(started);
              }

              @Override
              public void stopped(Term stopped) {
                synchronized (LeaderLatch.this) {
                  if (term == stopped) term = null;
                }
                for (Listener l : listeners) l.notLeader(stopped);
              }
            });
    this.thread = new Thread(loop, "baton-leader-latch " + election);
    this.thread.setDaemon(true);
  }

  public LeaderLatch addListener(Listener listener) {
    listeners.add(listener);
    return this;
  }

  /** Starts following (or, with campaign, standing in) the election. */
  public LeaderLatch start() {
    thread.start();
    return this;
  }

  /** Whether this pod leads now, and may act as leader. */
  public boolean hasLeadership() {
    Term t = term;
    return t != null && t.isValid();
  }

  /** The running term, or null. */
  public Term currentTerm() {
    Term t = term;
    return t != null && t.isValid() ? t : null;
  }

  /** Waits up to timeout for this pod to lead; the term, or null. */
  public synchronized Term await(Duration timeout) throws InterruptedException {
    long until = System.nanoTime() + timeout.toNanos();
    while (!hasLeadership()) {
      long left = until - System.nanoTime();
      if (left <= 0) return null;
      wait(Math.max(left / 1_000_000, 1));
    }
    return term;
  }

  /** Whether the loop ended with a stepping-down hand-over (the sidecar is shutting down). */
  public boolean handedOver() {
    return loop.handedOver();
  }

  /** Stops following; a campaign stands no more. */
  @Override
  public void close() {
    loop.close();
    try {
      thread.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // the loop ends on its own; the caller asked to stop
    }
  }
}
