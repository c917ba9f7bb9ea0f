package dev.baton.sdk;

import java.util.List;
import java.util.Map;

/**
 * The answer of {@code GET /semaphore/NAME} ({@link BatonClient#semaphoreState}): its permits,
 * holders, waiters, and this pod's part.
 *
 * @param semaphore the semaphore's name
 * @param permits its number of permits (this pod's grant's, else the one the queued pods carry);
 *     null when nobody holds or waits
 * @param holders the holders of its permits
 * @param waiters the waiters, in queue order
 * @param self this pod's part
 */
public record SemaphoreState(String semaphore, Integer permits, List<Holder> holders, List<Holder> waiters, OwnHold self) {
  static SemaphoreState of(Map<String, Object> m) {
    return new SemaphoreState(
        Json.string(m, "semaphore"),
        Json.integer(m, "permits"),
        Holder.list(m, "holders"),
        Holder.list(m, "waiters"),
        OwnHold.of(Json.object(m, "self")));
  }
}
