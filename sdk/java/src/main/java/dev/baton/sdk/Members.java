package dev.baton.sdk;

import java.time.Instant;
import java.util.List;

/** The live members of an election in queue order (the first leads), and their version. */
public record Members(String election, String version, List<Member> members) {
  /** One candidate. */
  public record Member(String identity, String address, String pod, Instant since, long token, boolean leader, String node) {}
}
