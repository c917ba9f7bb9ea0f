import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

/**
 * Curator meets a Baton refusal (tests/e2e/tests/refusals.rs).
 *
 * <p>{@code CuratorRefusal HOST:PORT}: with a shared quota of 5,000 bytes, the first 3,000-byte
 * create passes, the second is refused; then reads, a small create and deletes must work on the
 * same session, with no disconnection seen. Prints each step; exits 0 only if all of it held.
 */
public final class CuratorRefusal {
  private static final String BASE = "/refusals";
  private static final byte[] BIG = new byte[3000];

  private CuratorRefusal() {}

  public static void main(String[] args) {
    try {
      run(args);
      System.exit(0);
    } catch (Exception e) {
      System.err.print("FAILED: ");
      e.printStackTrace();
      System.exit(1);
    }
  }

  private static void run(String[] args) throws Exception {
    if (args.length != 1) {
      throw new IllegalArgumentException("usage: CuratorRefusal HOST:PORT");
    }
    Arrays.fill(BIG, (byte) 'x');
    // The usual production set-up: retries with back-off (Curator retries only lost connections).
    CuratorFramework curator =
        CuratorFrameworkFactory.newClient(args[0], 20_000, 15_000, new ExponentialBackoffRetry(100, 3));
    // Every connection state but the first CONNECTED (SUSPENDED, RECONNECTED, LOST): none while
    // the connection holds. CONNECTED comes once, maybe after blockUntilConnected returned.
    List<ConnectionState> after = new CopyOnWriteArrayList<>();
    curator
        .getConnectionStateListenable()
        .addListener(
            (client, state) -> {
              if (state != ConnectionState.CONNECTED) {
                after.add(state);
              }
            });
    curator.start();
    if (!curator.blockUntilConnected(15, TimeUnit.SECONDS)) {
      throw new IllegalStateException("no session within 15 s");
    }
    long session = curator.getZookeeperClient().getZooKeeper().getSessionId();
    System.out.printf(
        "client Curator on ZooKeeper %s, session 0x%x%n", org.apache.zookeeper.Version.getFullVersion(), session);

    curator.create().orSetData().forPath(BASE);
    curator.create().forPath(BASE + "/big-1", BIG);
    System.out.println("created big-1");
    Exception refusal = null;
    try {
      curator.create().forPath(BASE + "/big-2", BIG);
    } catch (Exception e) {
      refusal = e; // whatever this client makes of the refusal
    }
    if (refusal == null) {
      throw new IllegalStateException("big-2 was not refused");
    }
    System.out.println("refused big-2: " + refusal.getClass().getName() + ": " + refusal.getMessage());

    Stat stat = curator.checkExists().forPath(BASE + "/big-1");
    if (stat == null) {
      throw new IllegalStateException("big-1 is gone");
    }
    byte[] data = curator.getData().forPath(BASE + "/big-1");
    if (!Arrays.equals(data, BIG)) {
      throw new IllegalStateException("big-1 holds " + data.length + " bytes");
    }
    System.out.println("read big-1");
    curator.create().forPath(BASE + "/small", new byte[] {'s'});
    curator.delete().forPath(BASE + "/small");
    System.out.println("created and deleted small");
    curator.delete().forPath(BASE + "/big-1");
    curator.create().forPath(BASE + "/big-2", BIG);
    System.out.println("big-2 created once big-1 was deleted");

    long now = curator.getZookeeperClient().getZooKeeper().getSessionId();
    if (now != session) {
      throw new IllegalStateException(String.format("session changed from 0x%x to 0x%x", session, now));
    }
    if (!after.isEmpty()) {
      throw new IllegalStateException("connection states seen after connecting: " + after);
    }
    System.out.printf("same session 0x%x, no disconnection%n", session);
    curator.close();
    System.out.println("ok");
  }
}
