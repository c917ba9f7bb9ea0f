package dev.baton.sdk.examples;

import dev.baton.sdk.BatonClient;
import dev.baton.sdk.LeaderSelector;

/** The README's leader example: lead while the sidecar says so, stop the moment it does not. */
public final class LeaderExample {
  private LeaderExample() {}

  public static void main(String[] args) throws Exception {
    // --- README ---
    LeaderSelector selector = BatonClient.create().leaderSelector("", term -> {
      System.out.println("leading with fencing token " + term.token()); // do the leader's work until interrupted
      term.ended().join();
    }).start();
    Runtime.getRuntime().addShutdownHook(new Thread(selector::close)); // on SIGTERM: hand over
    // --- README ---
    selector.join();
  }
}
