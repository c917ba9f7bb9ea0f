package dev.baton.sdk;

/** The leader's work, as Curator's LeaderSelectorListener. */
@FunctionalInterface
public interface LeaderSelectorListener {
  /**
   * Runs while this pod leads. When the term ends ({@link Term#ended()} completes) the thread is
   * interrupted; return soon after. Returning while still leading gives leadership up (the
   * sidecar resigns and queues again).
   */
  void takeLeadership(Term term) throws Exception;
}
