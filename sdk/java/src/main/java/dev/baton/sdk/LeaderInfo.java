package dev.baton.sdk;

import java.time.Instant;

/**
 * The answer of {@code GET /leader[/NAME]}: who leads (null while nobody does), whether this pod
 * does, and until when it may act as leader (null when it does not lead).
 */
public record LeaderInfo(String election, Leader leader, boolean isLeader, String state, Instant validUntil) {
  /** Who leads, with the term's fencing token. */
  public record Leader(String identity, String address, String pod, Instant since, long token) {}
}
