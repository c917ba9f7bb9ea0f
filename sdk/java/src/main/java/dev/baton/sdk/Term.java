package dev.baton.sdk;

import java.time.Instant;
import java.util.concurrent.CompletableFuture;

/**
 * One stretch of leadership. {@link #ended()} completes the moment this pod must stop acting as
 * leader (another leader, deposed, session suspended or lost, validUntil passed, stepping down);
 * {@link #cause()} says why. Pass {@link #token()} (the fencing token) to what the leader writes to.
 */
public final class Term {
  private final String election;
  private final long token;
  private final Instant since;
  final CompletableFuture<Ended> ended = new CompletableFuture<>();
  volatile Instant validUntil;

  Term(String election, long token, Instant since, Instant validUntil) {
    this.election = election;
    this.token = token;
    this.since = since;
    this.validUntil = validUntil;
  }

  public String election() {
    return election;
  }

  /** The fencing token of this term. */
  public long token() {
    return token;
  }

  public Instant since() {
    return since;
  }

  /** The latest promise: until then this pod may act as leader without fresher word. */
  public Instant validUntil() {
    return validUntil;
  }

  /** Completes with why the term ended, the moment it is known. */
  public CompletableFuture<Ended> ended() {
    return ended;
  }

  /** Whether this pod may still act as leader. */
  public boolean isValid() {
    return !ended.isDone();
  }

  /** Why the term ended, null while it lasts. */
  public Ended cause() {
    return ended.getNow(null);
  }

  /** Throws why the term ended, once it has: call it before each step a leader takes. */
  public void check() throws Ended {
    Ended why = cause();
    if (why != null) throw why;
  }
}
