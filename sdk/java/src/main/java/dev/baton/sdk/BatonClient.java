package dev.baton.sdk;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * A client of one Baton sidecar's localhost HTTP API (DESIGN §2), on java.net.http only:
 * leadership like Curator's {@link LeaderLatch} and {@link LeaderSelector}, locks and semaphore
 * permits held by a stream or a renewed lease with their fencing tokens, barriers, groups and the
 * pod's event stream. Safe for concurrent use.
 */
public final class BatonClient {
  /** Where the injected sidecar listens. */
  public static final String DEFAULT_ADDRESS = "127.0.0.1:4040";

  /** The longest wait the sidecar takes in one call; {@link LockOptions#waitFor} refuses more. */
  public static final Duration MAX_WAIT = Api.WAIT_MAX;

  private final Transport t;
  private final Duration idle;

  /** The sidecar at $BATON_SIDECAR, else 127.0.0.1:4040. */
  public static BatonClient create() {
    return new BatonClient(null);
  }

  /** The sidecar at address ("HOST:PORT" or "http://HOST:PORT"); null: as {@link #create()}. */
  public BatonClient(String address) {
    this(address, Duration.ofSeconds(25));
  }

  /**
   * With streamIdle: how long a stream may stay silent before it is taken as dead (the sidecar
   * sends a keep-alive every 10 s).
   */
  public BatonClient(String address, Duration streamIdle) {
    String a = address;
    if (a == null || a.isEmpty()) a = System.getenv("BATON_SIDECAR");
    if (a == null || a.isEmpty()) a = DEFAULT_ADDRESS;
    if (!a.contains("://")) a = "http://" + a;
    this.t = new Transport(a.replaceAll("/+$", ""));
    this.idle = streamIdle;
  }

  // --- leadership ---

  /** Who leads election ("" or null: the sidecar's only one). */
  public LeaderInfo leader(String election) throws BatonException, IOException, InterruptedException {
    return leaderInfo(t.call(LeaderElection.op(election, Api.OP_LEADER, Api.OP_LEADER_DEFAULT), election, null, Duration.ZERO));
  }

  /** Long-polls until the leader's token differs from token, or wait passes. */
  public LeaderInfo waitLeaderChange(String election, long token, Duration wait)
      throws BatonException, IOException, InterruptedException {
    return leaderInfo(
        t.call(
            LeaderElection.op(election, Api.OP_LEADER, Api.OP_LEADER_DEFAULT),
            election,
            Transport.query(Api.PARAM_WAIT, Transport.duration(wait), Api.PARAM_TOKEN, Long.toString(token)),
            wait));
  }

  private static LeaderInfo leaderInfo(Map<String, Object> m) {
    Map<String, Object> l = Json.object(m, "leader");
    Map<String, Object> self = Json.object(m, "self");
    LeaderInfo.Leader leader =
        l.isEmpty()
            ? null
            : new LeaderInfo.Leader(
                Json.string(l, "identity"),
                Json.string(l, "address"),
                Json.string(l, "pod"),
                Transport.time(l.get("since")),
                Json.number(l, "token"));
    return new LeaderInfo(
        Json.string(m, "election"),
        leader,
        Json.bool(self, "isLeader"),
        Json.string(self, "state"),
        Transport.time(self.get("validUntil")));
  }

  /** Steps down and queues again at the back. */
  public void resign(String election) throws BatonException, IOException, InterruptedException {
    t.call(LeaderElection.op(election, Api.OP_LEADER_RESIGN, Api.OP_LEADER_RESIGN_DEFAULT), election, null, Duration.ZERO);
  }

  /** Answers stepping-down (selectors and latches do it for the app); whether this pod led. */
  public boolean release(String election) throws BatonException, IOException, InterruptedException {
    Api.Operation release = LeaderElection.op(election, Api.OP_LEADER_RELEASE, Api.OP_LEADER_RELEASE_DEFAULT);
    return Json.bool(t.call(release, election, null, Duration.ZERO), "wasLeader");
  }

  /** A LeaderSelector following election (not started). */
  public LeaderSelector leaderSelector(String election, LeaderSelectorListener work) {
    return new LeaderSelector(t, election, false, idle, work);
  }

  /**
   * A LeaderSelector whose pod stands in election only while it runs (the sidecar's --candidacy
   * app): it holds the campaign stream open (not started).
   */
  public LeaderSelector campaign(String election, LeaderSelectorListener work) {
    return new LeaderSelector(t, election, true, idle, work);
  }

  /** A LeaderLatch following election (not started). */
  public LeaderLatch leaderLatch(String election) {
    return new LeaderLatch(t, election, false, idle);
  }

  // --- locks and semaphores ---

  /** Lock name, held by a stream (it dies with this process), waiting as long as it takes. */
  public Lock lock(String name) throws BatonException, IOException, InterruptedException {
    return lock(name, LockOptions.defaults());
  }

  /** Lock name as options say (mode, wait, lease). */
  public Lock lock(String name, LockOptions options) throws BatonException, IOException, InterruptedException {
    Map<String, String> q = Transport.query(Api.PARAM_MODE, options.mode);
    return acquire(Lock.LOCK, name, q, options);
  }

  /** One of permits permits of semaphore name, held and released as a lock is. */
  public Lock semaphore(String name, int permits, LockOptions options)
      throws BatonException, IOException, InterruptedException {
    Map<String, String> q = Transport.query(Api.PARAM_PERMITS, Integer.toString(permits));
    return acquire(Lock.SEMAPHORE, name, q, options);
  }

  /** {@code lock(name, options.waitFor(Duration.ZERO))}: granted only if free now, else NotGranted. */
  public Lock tryLock(String name, LockOptions options) throws BatonException, IOException, InterruptedException {
    return lock(name, options.tryOnlyCopy());
  }

  /** An exclusive stream-held lock only if free now, else NotGranted. */
  public Lock tryLock(String name) throws BatonException, IOException, InterruptedException {
    return tryLock(name, LockOptions.defaults());
  }

  /** A permit only if one is free now, else NotGranted. */
  public Lock trySemaphore(String name, int permits, LockOptions options)
      throws BatonException, IOException, InterruptedException {
    return semaphore(name, permits, options.tryOnlyCopy());
  }

  /** GET /semaphore/NAME: its permits, holders, waiters, and this pod's part ({@code self}). */
  public SemaphoreState semaphoreState(String name) throws BatonException, IOException, InterruptedException {
    return SemaphoreState.of(t.call(Lock.SEMAPHORE.inspect(), name, null, Duration.ZERO));
  }

  /** Releases this pod's permit token of semaphore name by its token alone. */
  public void releaseSemaphore(String name, long token) throws BatonException, IOException, InterruptedException {
    t.call(Lock.SEMAPHORE.release(), name, Transport.query(Api.PARAM_TOKEN, Long.toString(token)), Duration.ZERO);
  }

  /** Whether the sidecar has a session with the ensemble (GET /readyz). */
  public boolean healthy() throws InterruptedException {
    try {
      t.call(Api.OP_READYZ, null, null, Duration.ZERO);
      return true;
    } catch (BatonException | IOException e) {
      return false;
    }
  }

  /** GET /lock/NAME: holder, holders, waiters, and whether ({@code self}) this pod holds it. */
  public LockState lockState(String name) throws BatonException, IOException, InterruptedException {
    return LockState.of(t.call(Lock.LOCK.inspect(), name, null, Duration.ZERO));
  }

  /** Releases grant token of lock name held through this sidecar (Lock.close does it for its own). */
  public void releaseLock(String name, long token) throws BatonException, IOException, InterruptedException {
    t.call(Lock.LOCK.release(), name, Transport.query(Api.PARAM_TOKEN, Long.toString(token)), Duration.ZERO);
  }

  /** Reads on a daemon thread, never blocking a thread for an event. */
  private static final java.util.concurrent.ExecutorService READER =
      java.util.concurrent.Executors.newCachedThreadPool(
          r -> {
            Thread thread = new Thread(r, "baton-acquire");
            thread.setDaemon(true);
            return thread;
          });

  /**
   * The stream's first event, read so that interrupting the waiting thread ends the wait: a
   * socket read cannot be interrupted, so another thread reads and this one waits for it.
   */
  private static Transport.Event firstEvent(Transport.EventStream stream) throws IOException, InterruptedException {
    java.util.concurrent.Future<Transport.Event> read = READER.submit(stream::next);
    try {
      return read.get();
    } catch (InterruptedException e) {
      stream.close();
      throw e;
    } catch (java.util.concurrent.ExecutionException e) {
      stream.close();
      Throwable cause = e.getCause();
      if (cause instanceof IOException io) throw io;
      if (cause instanceof RuntimeException rt) throw rt;
      throw new IOException(cause);
    }
  }

  private Lock acquire(Lock.Ops ops, String name, Map<String, String> query, LockOptions options)
      throws BatonException, IOException, InterruptedException {
    while (true) {
      Duration wait = options.wait == null ? MAX_WAIT : options.wait;
      query.put(Api.PARAM_WAIT, Transport.duration(wait));
      try {
        if (options.ttl != null) {
          query.put(Api.PARAM_TTL, Transport.duration(options.ttl));
          return new Lock(t, ops, name, Grant.of(t.call(ops.acquire(), name, query, wait)), null, options.ttl);
        }
        query.put(Api.PARAM_HOLD, Api.HOLD_STREAM);
        Transport.EventStream stream = t.stream(ops.acquire(), name, query, wait, idle);
        Transport.Event first = firstEvent(stream);
        if (first == null || !first.name.equals("granted")) {
          stream.close();
          throw new IOException(Transport.path(ops.acquire(), name) + ": the hold's stream began without a grant");
        }
        return new Lock(t, ops, name, Grant.of(first.data), stream, null);
      } catch (BatonException.NotGranted e) {
        // Only an unbounded wait goes on: the sidecar gives one call 600 s at most.
        if (options.wait != null) throw e;
      }
    }
  }

  // --- groups, barriers, events ---

  /** The live members of election now. */
  public Members members(String election) throws BatonException, IOException, InterruptedException {
    return members(t.call(Api.OP_MEMBERS, election, null, Duration.ZERO));
  }

  /** Waits up to wait for the members to differ from version. */
  public Members waitMembers(String election, String version, Duration wait)
      throws BatonException, IOException, InterruptedException {
    Map<String, String> q = Transport.query(Api.PARAM_VERSION, version, Api.PARAM_WAIT, Transport.duration(wait));
    return members(t.call(Api.OP_MEMBERS, election, q, wait));
  }

  private static Members members(Map<String, Object> m) {
    List<Members.Member> list = new ArrayList<>();
    Object raw = m.get("members");
    if (raw instanceof List) {
      for (Object o : (List<?>) raw) {
        Map<String, Object> x = Json.object(o);
        list.add(
            new Members.Member(
                Json.string(x, "identity"),
                Json.string(x, "address"),
                Json.string(x, "pod"),
                Transport.time(x.get("since")),
                Json.number(x, "token"),
                Json.bool(x, "leader"),
                Json.string(x, "node")));
      }
    }
    return new Members(Json.string(m, "election"), Json.string(m, "version"), list);
  }

  /** Enters barrier name; returns once parties pods are in, throws NotPassed after wait. */
  public void barrier(String name, int parties, Duration wait)
      throws BatonException, IOException, InterruptedException {
    Map<String, String> q =
        Transport.query(Api.PARAM_PARTIES, Integer.toString(parties), Api.PARAM_WAIT, Transport.duration(wait));
    t.call(Api.OP_BARRIER, name, q, wait);
  }

  /** One event of {@link #events}: its name and JSON data. */
  public record Event(String name, Map<String, Object> data) {}

  /** The name of the event {@link #events} adds when the stream to the sidecar breaks. */
  public static final String DISCONNECTED = "disconnected";

  /**
   * Follows the pod's events (GET /events) on a daemon thread until the returned handle is closed,
   * reopening the stream when it breaks after an event named {@link #DISCONNECTED} (stop acting:
   * nothing known is current until the next {@code state}, which the reopened stream starts
   * with). A {@code state} event whose data's state is SUSPENDED means stop acting too.
   */
  public AutoCloseable events(Consumer<Event> sink) {
    var closed = new java.util.concurrent.atomic.AtomicBoolean();
    var current = new java.util.concurrent.atomic.AtomicReference<Transport.EventStream>();
    Thread th =
        new Thread(
            () -> {
              long backoff = 100;
              while (!closed.get()) {
                String why = "the sidecar ended the stream";
                try {
                  Transport.EventStream s = t.stream(Api.OP_EVENTS, null, null, Duration.ZERO, idle);
                  current.set(s);
                  if (closed.get()) s.close();
                  backoff = 100;
                  Transport.Event ev;
                  while ((ev = s.next()) != null) sink.accept(new Event(ev.name, ev.data));
                } catch (BatonException | IOException | RuntimeException e) {
                  why = e.toString();
                } catch (InterruptedException e) {
                  return;
                }
                if (closed.get()) return;
                sink.accept(new Event(DISCONNECTED, Map.of("error", why)));
                try {
                  Thread.sleep(backoff);
                } catch (InterruptedException e) {
                  return;
                }
                backoff = Math.min(backoff * 2, 2000);
              }
            },
            "baton-events");
    th.setDaemon(true);
    th.start();
    return () -> {
      closed.set(true);
      Transport.EventStream s = current.get();
      if (s != null) s.close();
      th.join();
    };
  }
}
