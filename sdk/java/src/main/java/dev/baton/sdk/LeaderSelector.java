package dev.baton.sdk;

import java.io.IOException;
import java.time.Duration;

/**
 * Leadership like Curator's LeaderSelector: {@link LeaderSelectorListener#takeLeadership} runs in
 * its own thread for each term this pod leads, and is interrupted the moment the term ends. On
 * the sidecar's SIGTERM ({@code stepping-down}) the term ends, the selector waits for the work
 * to return, then releases the election so the next pod leads at once.
 */
public final class LeaderSelector implements AutoCloseable {
  private final LeaderElection loop;
  private final Thread thread;
  private final Transport t;
  private final String election;

  LeaderSelector(Transport t, String election, boolean campaign, Duration idle, LeaderSelectorListener work) {
    this.t = t;
    this.election = election;
    this.loop = new LeaderElection(t, election, campaign, idle, new Runner(work));
    this.thread = new Thread(loop, "baton-leader-selector " + election);
    this.thread.setDaemon(true);
  }

  private final class Runner implements LeaderElection.Listener {
    private final LeaderSelectorListener work;
    private Thread worker;

    Runner(LeaderSelectorListener work) {
      this.work = work;
    }

    @Override
    public void started(Term term) {
      worker =
          new Thread(
              () -> {
                try {
                  work.takeLeadership(term);
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                } catch (Exception e) {
                  // the app's own failure: give leadership up below
                }
                if (term.isValid()) resign();
              },
              "baton-leader " + election);
      worker.setDaemon(true);
      worker.start();
    }

    @Override
    public void stopped(Term term) {
      Thread w = worker;
      if (w == null) return;
      w.interrupt();
      try {
        w.join();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private void resign() {
    try {
      t.call(LeaderElection.op(election, Api.OP_LEADER_RESIGN, Api.OP_LEADER_RESIGN_DEFAULT), election, null, Duration.ZERO);
    } catch (BatonException | IOException e) {
      // the term ends with the next event anyway
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Starts following (or, with campaign, standing in) the election. */
  public LeaderSelector start() {
    thread.start();
    return this;
  }

  /** Whether the loop ended with a stepping-down hand-over (the sidecar is shutting down). */
  public boolean handedOver() {
    return loop.handedOver();
  }

  /** Waits until the selector stops: after close(), or after a stepping-down hand-over. */
  public void join() throws InterruptedException {
    thread.join();
  }

  /** Stops: the running term ends (its work is interrupted), and a campaign stands no more. */
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
