package dev.baton.sdk;

import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The loop under {@link LeaderSelector} and {@link LeaderLatch}: follows {@code GET
 * /leader/NAME?follow=stream} (or holds {@code /campaign} open under --candidacy app), starts a
 * {@link Term} when this pod leads and ends it the moment it may no longer act: another leader,
 * deposed, suspended, validUntil passed without fresher word, or stepping-down, after which it
 * waits for the app's work to stop and releases the election so the next pod leads at once.
 */
final class LeaderElection implements Runnable {
  /** What the loop tells its owner. */
  interface Listener {
    /** A term started: run the leader's work (in another thread) until it ends. */
    void started(Term term);

    /** The term ended (after {@link Term#ended()} completed): wait for the work to stop. */
    void stopped(Term term);

    /** Another leader (or none: null identity) was seen. */
    default void newLeader(String identity, long token) {}
  }

  private final Transport t;
  private final String election;
  private final boolean campaign;
  private final Duration idle;
  private final Listener listener;
  private volatile boolean closed;
  private volatile Transport.EventStream stream;
  private volatile boolean handedOver;
  private Term term;
  private Long lastLeader;
  private boolean seenLeader;

  LeaderElection(Transport t, String election, boolean campaign, Duration idle, Listener listener) {
    this.t = t;
    this.election = election == null ? "" : election;
    this.campaign = campaign;
    this.idle = idle;
    this.listener = listener;
  }

  /**
   * named, the operation on election, or, for "" or null (the sidecar's only election), only, its
   * form without a name.
   */
  static Api.Operation op(String election, Api.Operation named, Api.Operation only) {
    return election == null || election.isEmpty() ? only : named;
  }

  /** Whether the loop ended with a stepping-down hand-over. */
  boolean handedOver() {
    return handedOver;
  }

  /** Stops the loop (and, with campaign, the candidacy); run() returns soon after. */
  void close() {
    closed = true;
    Transport.EventStream s = stream;
    if (s != null) s.close();
  }

  @Override
  public void run() {
    long backoff = 100;
    while (!closed && !handedOver) {
      Throwable why = null;
      try {
        follow();
      } catch (BatonException.ShuttingDown e) {
        break;
      } catch (BatonException e) {
        why = e;
        if (e.status() / 100 == 4 && !(e instanceof BatonException.CampaignInProgress)) closed = true;
      } catch (IOException | RuntimeException e) {
        why = e;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        closed = true;
      }
      stop(new Ended.Lost("election " + election + ": the stream ended", why));
      if (closed || handedOver) break;
      try {
        Thread.sleep(backoff);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
      backoff = Math.min(backoff * 2, 2000);
    }
    stop(new Ended.Released("election " + election + ": stopped"));
  }

  private void follow() throws BatonException, IOException, InterruptedException {
    Transport.EventStream s =
        campaign
            ? t.stream(op(election, Api.OP_LEADER_CAMPAIGN, Api.OP_LEADER_CAMPAIGN_DEFAULT), election, null, Duration.ZERO, idle)
            : t.stream(
                op(election, Api.OP_LEADER, Api.OP_LEADER_DEFAULT),
                election,
                Transport.query(Api.PARAM_FOLLOW, Api.FOLLOW_STREAM),
                Duration.ZERO,
                idle);
    stream = s;
    if (closed) s.close();
    // Events arrive on this thread; validUntil is watched by a refresher beside it.
    Thread refresher = new Thread(this::refreshWhileLeading, "baton-leader-refresh " + election);
    refresher.setDaemon(true);
    refresher.start();
    try {
      while (true) {
        Transport.Event ev;
        try {
          ev = s.next();
        } catch (IOException e) {
          if (closed || handedOver) return;
          throw e;
        }
        if (ev == null) return;
        handle(ev);
      }
    } finally {
      s.close();
      refresher.interrupt();
      refresher.join();
    }
  }

  private synchronized void handle(Transport.Event ev) {
    Map<String, Object> d = ev.data;
    switch (ev.name) {
      case "leader":
        {
          Map<String, Object> leader = Json.object(d, "leader");
          Map<String, Object> self = Json.object(d, "self");
          sawLeader(leader);
          boolean leads = Json.bool(self, "isLeader") && !leader.isEmpty();
          long token = Json.number(leader, "token");
          if (term != null && (!leads || token != term.token())) {
            stop(new Ended.Lost("election " + election + ": this pod no longer leads", null));
          }
          if (leads && term == null) start(token, leader.get("since"), self.get("validUntil"));
          else if (leads) extend(self.get("validUntil"));
          break;
        }
      case "elected":
        {
          long token = Json.number(d, "token");
          if (term != null && term.token() != token) {
            stop(new Ended.Lost("election " + election + ": a new term", null));
          }
          if (term == null) start(token, d.get("since"), d.get("validUntil"));
          break;
        }
      case "candidate":
        sawLeader(Json.object(d, "leader"));
        stop(new Ended.Lost("election " + election + ": queued again", null));
        break;
      case "deposed":
      case "lost":
      case "connected":
        stop(new Ended.Lost("election " + election + ": " + ev.name, null));
        break;
      case "suspended":
        // Leadership is uncertain while the session is cut off: stop acting now.
        stop(new Ended.Suspended("election " + election));
        break;
      case "resumed":
        if (term == null) {
          try {
            Map<String, Object> info = t.call(op(election, Api.OP_LEADER, Api.OP_LEADER_DEFAULT), election, null, Duration.ZERO);
            Map<String, Object> leader = Json.object(info, "leader");
            Map<String, Object> self = Json.object(info, "self");
            if (Json.bool(self, "isLeader") && !leader.isEmpty()) {
              start(Json.number(leader, "token"), leader.get("since"), self.get("validUntil"));
            }
          } catch (BatonException | IOException e) {
            // the stream's next events say more
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        }
        break;
      case "stepping-down":
        stop(new Ended.SteppingDown("election " + election));
        // The app has stopped acting as leader: hand over now rather than after the grace.
        try {
          t.call(op(election, Api.OP_LEADER_RELEASE, Api.OP_LEADER_RELEASE_DEFAULT), election, null, Duration.ZERO);
        } catch (BatonException | IOException e) {
          // the grace ends it anyway
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        handedOver = true;
        break;
      default:
        break;
    }
  }

  private void sawLeader(Map<String, Object> leader) {
    Long token = leader.isEmpty() ? null : Json.number(leader, "token");
    if (seenLeader && Objects.equals(token, lastLeader)) return;
    seenLeader = true;
    lastLeader = token;
    listener.newLeader(Json.string(leader, "identity"), token == null ? 0 : token);
  }

  private void start(long token, Object since, Object validUntil) {
    Instant until = Transport.time(validUntil);
    if (until == null || !Instant.now().isBefore(until)) return;
    term = new Term(election, token, Transport.time(since), until);
    listener.started(term);
    notifyAll();
  }

  private void extend(Object validUntil) {
    Instant until = Transport.time(validUntil);
    if (term != null && until != null && until.isAfter(term.validUntil)) term.validUntil = until;
  }

  private synchronized void stop(Ended why) {
    Term current = term;
    if (current == null) return;
    term = null;
    current.ended.complete(why);
    listener.stopped(current);
    notifyAll();
  }

  /** Ends the term at validUntil; asks for a fresher one every third of the time left. */
  private void refreshWhileLeading() {
    try {
      while (true) {
        Term current;
        synchronized (this) {
          while (term == null) wait();
          current = term;
          Duration left = Duration.between(Instant.now(), current.validUntil);
          if (left.isNegative() || left.isZero()) {
            stop(new Ended.ValidUntilPassed("election " + election));
            continue;
          }
          long step = Math.max(left.toMillis() / 3, 50);
          long until = System.currentTimeMillis() + step;
          while (term == current && System.currentTimeMillis() < until) {
            wait(Math.max(until - System.currentTimeMillis(), 1));
          }
          if (term != current) continue;
        }
        Duration bound = Duration.between(Instant.now(), current.validUntil);
        if (bound.isNegative() || bound.isZero()) continue;
        CompletableFuture<Map<String, Object>> answer =
            t.callAsync(LeaderElection.op(election, Api.OP_LEADER, Api.OP_LEADER_DEFAULT), election, null, bound);
        Map<String, Object> info;
        try {
          info = answer.get(bound.toNanos(), TimeUnit.NANOSECONDS);
        } catch (TimeoutException | java.util.concurrent.ExecutionException e) {
          answer.cancel(true);
          continue; // validUntil still bounds the term
        }
        synchronized (this) {
          if (term != current) continue;
          Map<String, Object> leader = Json.object(info, "leader");
          Map<String, Object> self = Json.object(info, "self");
          if (Json.bool(self, "isLeader") && Json.number(leader, "token") == current.token()) {
            extend(self.get("validUntil"));
          } else {
            stop(new Ended.Lost("election " + election + ": this pod no longer leads", null));
          }
        }
      }
    } catch (InterruptedException e) {
      // the stream ended
    }
  }
}
