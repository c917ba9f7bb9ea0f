package dev.baton.sdk;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One holder or waiter of a lock ({@link LockState}) or of a semaphore's permits ({@link
 * SemaphoreState}), in queue order.
 *
 * @param identity the pod's identity
 * @param mode a lock's entry: exclusive, read or write; null for a semaphore's
 * @param permits a semaphore's entry: the number of permits it asked with; null for a lock's
 * @param token the fencing token of its node (its grant's, once it holds)
 * @param leaseExpiresAt when its lease runs out; null for a stream hold or a waiter
 * @param node its node in the ensemble
 */
public record Holder(String identity, String mode, Integer permits, long token, Instant leaseExpiresAt, String node) {
  static Holder of(Map<String, Object> m) {
    return new Holder(
        Json.string(m, "identity"),
        Json.string(m, "mode"),
        Json.integer(m, "permits"),
        Json.number(m, "token"),
        Transport.time(m.get("leaseExpiresAt")),
        Json.string(m, "node"));
  }

  static List<Holder> list(Map<String, Object> m, String key) {
    List<Holder> out = new ArrayList<>();
    if (m.get(key) instanceof List<?> raw) {
      for (Object o : raw) out.add(of(Json.object(o)));
    }
    return List.copyOf(out);
  }
}
