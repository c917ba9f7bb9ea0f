package dev.baton.sdk;

import java.util.List;
import java.util.Map;

/**
 * The answer of {@code GET /lock/NAME} ({@link BatonClient#lockState}): who holds the lock, who
 * waits, and this pod's part.
 *
 * @param lock the lock's name
 * @param holder the first holder; null while nobody holds it
 * @param holders every holder (more than one: readers of a read/write lock)
 * @param waiters the waiters, in queue order
 * @param self this pod's part
 */
public record LockState(String lock, Holder holder, List<Holder> holders, List<Holder> waiters, OwnHold self) {
  static LockState of(Map<String, Object> m) {
    Map<String, Object> holder = Json.object(m, "holder");
    return new LockState(
        Json.string(m, "lock"),
        holder.isEmpty() ? null : Holder.of(holder),
        Holder.list(m, "holders"),
        Holder.list(m, "waiters"),
        OwnHold.of(Json.object(m, "self")));
  }
}
