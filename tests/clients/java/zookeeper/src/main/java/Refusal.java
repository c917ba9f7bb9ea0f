import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher.Event.EventType;
import org.apache.zookeeper.Watcher.Event.KeeperState;
import org.apache.zookeeper.ZooDefs.Ids;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

/**
 * Apache ZooKeeper's Java client meets a Baton refusal (tests/e2e/tests/refusals.rs).
 *
 * <p>{@code Refusal HOST:PORT}: with a shared quota of 5,000 bytes, the first 3,000-byte create
 * passes, the second is refused; then reads, a small create and deletes must work on the same
 * session, with no disconnection seen. Prints each step; exits 0 only if all of it held.
 */
public final class Refusal {
  private static final String BASE = "/refusals";
  private static final byte[] BIG = new byte[3000];

  private Refusal() {}

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
      throw new IllegalArgumentException("usage: Refusal HOST:PORT");
    }
    Arrays.fill(BIG, (byte) 'x');
    CountDownLatch connected = new CountDownLatch(1);
    // Every session state after the first SyncConnected: none while the connection holds.
    List<KeeperState> after = new CopyOnWriteArrayList<>();
    ZooKeeper zk =
        new ZooKeeper(
            args[0],
            20_000,
            event -> {
              if (event.getType() != EventType.None) {
                return;
              }
              if (connected.getCount() == 0) {
                after.add(event.getState());
              } else if (event.getState() == KeeperState.SyncConnected) {
                connected.countDown();
              }
            });
    if (!connected.await(15, TimeUnit.SECONDS)) {
      throw new IllegalStateException("no session within 15 s");
    }
    long session = zk.getSessionId();
    System.out.printf("client %s, session 0x%x%n", org.apache.zookeeper.Version.getFullVersion(), session);

    try {
      zk.create(BASE, null, Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
    } catch (KeeperException.NodeExistsException e) {
      // from an earlier run on the same server
    }
    zk.create(BASE + "/big-1", BIG, Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
    System.out.println("created big-1");
    Exception refusal = null;
    try {
      zk.create(BASE + "/big-2", BIG, Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
    } catch (KeeperException | RuntimeException e) {
      refusal = e; // whatever this client makes of the refusal
    }
    if (refusal == null) {
      throw new IllegalStateException("big-2 was not refused");
    }
    System.out.println("refused big-2: " + refusal.getClass().getName() + ": " + refusal.getMessage());

    Stat stat = zk.exists(BASE + "/big-1", false);
    if (stat == null) {
      throw new IllegalStateException("big-1 is gone");
    }
    byte[] data = zk.getData(BASE + "/big-1", false, stat);
    if (!Arrays.equals(data, BIG)) {
      throw new IllegalStateException("big-1 holds " + data.length + " bytes");
    }
    System.out.println("read big-1");
    zk.create(BASE + "/small", new byte[] {'s'}, Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
    zk.delete(BASE + "/small", -1);
    System.out.println("created and deleted small");
    zk.delete(BASE + "/big-1", -1);
    zk.create(BASE + "/big-2", BIG, Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
    System.out.println("big-2 created once big-1 was deleted");

    if (zk.getSessionId() != session) {
      throw new IllegalStateException(String.format("session changed from 0x%x to 0x%x", session, zk.getSessionId()));
    }
    if (!after.isEmpty()) {
      throw new IllegalStateException("session states seen after connecting: " + after);
    }
    System.out.printf("same session 0x%x, no disconnection%n", session);
    zk.close();
    System.out.println("ok");
  }
}
