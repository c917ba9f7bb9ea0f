package dev.baton.sdk.examples;

import dev.baton.sdk.BatonClient;
import dev.baton.sdk.Lock;

/** The README's lock example: hold lock db while this process lives, pass its token on. */
public final class LockExample {
  private LockExample() {}

  public static void main(String[] args) throws Exception {
    // --- README ---
    try (Lock lock = BatonClient.create().lock("db")) { // held by a stream: dies with this process
      System.out.println("holding db with fencing token " + lock.token()); // lock.lost() completes if it is lost
    }
    // --- README ---
  }
}
