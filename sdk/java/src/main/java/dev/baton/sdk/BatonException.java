package dev.baton.sdk;

import java.util.Map;
import java.util.function.BiFunction;

/**
 * An error answer of the sidecar: {@code {"error": {"code", "message"}}} with its HTTP status. Each
 * documented code (DESIGN §2) has its own nested subclass ({@link NotGranted}, {@link StaleToken},
 * ...) to catch; {@link #code()}, {@link #status()} and the message are always set.
 */
public class BatonException extends Exception {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final String code;

  public BatonException(int status, String code, String message) {
    super(status + " " + code + ": " + message);
    this.status = status;
    this.code = code;
  }

  /** The HTTP status. */
  public int status() {
    return status;
  }

  /** The stable, machine-readable code, e.g. {@code NotGranted}. */
  public String code() {
    return code;
  }


  /** 409: not granted within wait (wait=0: held elsewhere). */
  public static final class NotGranted extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotGranted(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: this pod holds the lock already. */
  public static final class AlreadyHeld extends BatonException {
    private static final long serialVersionUID = 1L;

    public AlreadyHeld(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: another acquire of this lock runs on this pod. */
  public static final class AcquireInProgress extends BatonException {
    private static final long serialVersionUID = 1L;

    public AcquireInProgress(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: the token is not the current grant's. */
  public static final class StaleToken extends BatonException {
    private static final long serialVersionUID = 1L;

    public StaleToken(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: renew or release without a token. */
  public static final class MissingToken extends BatonException {
    private static final long serialVersionUID = 1L;

    public MissingToken(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: the token is not an integer. */
  public static final class InvalidToken extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidToken(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: a stream hold has no lease to renew. */
  public static final class StreamHold extends BatonException {
    private static final long serialVersionUID = 1L;

    public StreamHold(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: hold=stream takes no ttl. */
  public static final class TtlWithStream extends BatonException {
    private static final long serialVersionUID = 1L;

    public TtlWithStream(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: hold is not stream. */
  public static final class InvalidHold extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidHold(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: mode is not read or write. */
  public static final class InvalidMode extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidMode(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: this pod holds no such grant. */
  public static final class NotHeld extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotHeld(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** the grant ended. */
  public static final class LockLost extends BatonException {
    private static final long serialVersionUID = 1L;

    public LockLost(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: another pod queued with another N. */
  public static final class PermitsMismatch extends BatonException {
    private static final long serialVersionUID = 1L;

    public PermitsMismatch(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class MissingPermits extends BatonException {
    private static final long serialVersionUID = 1L;

    public MissingPermits(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400: permits outside 1..10000. */
  public static final class InvalidPermits extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidPermits(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: the barrier's wait ran out. */
  public static final class NotPassed extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotPassed(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: another party waits for another N. */
  public static final class PartiesMismatch extends BatonException {
    private static final long serialVersionUID = 1L;

    public PartiesMismatch(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class MissingParties extends BatonException {
    private static final long serialVersionUID = 1L;

    public MissingParties(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class InvalidParties extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidParties(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 503 on /leader/NAME/ready. */
  public static final class NotLeader extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotLeader(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 404: the sidecar stands in no election. */
  public static final class NoElection extends BatonException {
    private static final long serialVersionUID = 1L;

    public NoElection(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 404: not one of the sidecar's elections. */
  public static final class UnknownElection extends BatonException {
    private static final long serialVersionUID = 1L;

    public UnknownElection(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class FollowWithWait extends BatonException {
    private static final long serialVersionUID = 1L;

    public FollowWithWait(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class InvalidFollow extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidFollow(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: one campaign stream per election per pod. */
  public static final class CampaignInProgress extends BatonException {
    private static final long serialVersionUID = 1L;

    public CampaignInProgress(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: campaign under --candidacy always. */
  public static final class CandidacyAlways extends BatonException {
    private static final long serialVersionUID = 1L;

    public CandidacyAlways(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 409: release outside a SIGTERM hand-off. */
  public static final class NotSteppingDown extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotSteppingDown(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 503: SIGTERM: nothing new is granted. */
  public static final class ShuttingDown extends BatonException {
    private static final long serialVersionUID = 1L;

    public ShuttingDown(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 503: the app is unhealthy. */
  public static final class AppUnhealthy extends BatonException {
    private static final long serialVersionUID = 1L;

    public AppUnhealthy(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 503: the sidecar has no session. */
  public static final class NotConnected extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotConnected(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 503: the session is cut off. */
  public static final class SessionSuspended extends BatonException {
    private static final long serialVersionUID = 1L;

    public SessionSuspended(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** the session expired. */
  public static final class SessionLost extends BatonException {
    private static final long serialVersionUID = 1L;

    public SessionLost(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** the ensemble answered with an error. */
  public static final class EnsembleError extends BatonException {
    private static final long serialVersionUID = 1L;

    public EnsembleError(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** the recipe's node was deleted. */
  public static final class NodeVanished extends BatonException {
    private static final long serialVersionUID = 1L;

    public NodeVanished(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class InvalidName extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidName(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class InvalidDuration extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidDuration(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class InvalidQuery extends BatonException {
    private static final long serialVersionUID = 1L;

    public InvalidQuery(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class UnknownParameter extends BatonException {
    private static final long serialVersionUID = 1L;

    public UnknownParameter(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class DuplicateParameter extends BatonException {
    private static final long serialVersionUID = 1L;

    public DuplicateParameter(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 400. */
  public static final class BadBody extends BatonException {
    private static final long serialVersionUID = 1L;

    public BadBody(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 413. */
  public static final class PayloadTooLarge extends BatonException {
    private static final long serialVersionUID = 1L;

    public PayloadTooLarge(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 404. */
  public static final class NotFound extends BatonException {
    private static final long serialVersionUID = 1L;

    public NotFound(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 405. */
  public static final class MethodNotAllowed extends BatonException {
    private static final long serialVersionUID = 1L;

    public MethodNotAllowed(int status, String code, String message) {
      super(status, code, message);
    }
  }

  /** 403: the probe port serves probes only. */
  public static final class ProbePortReadOnly extends BatonException {
    private static final long serialVersionUID = 1L;

    public ProbePortReadOnly(int status, String code, String message) {
      super(status, code, message);
    }
  }

  private static final Map<String, BiFunction<Integer, String, BatonException>> BY_CODE =
      Map.ofEntries(
          Map.entry("NotGranted", (s, m) -> new NotGranted(s, "NotGranted", m)),
          Map.entry("AlreadyHeld", (s, m) -> new AlreadyHeld(s, "AlreadyHeld", m)),
          Map.entry("AcquireInProgress", (s, m) -> new AcquireInProgress(s, "AcquireInProgress", m)),
          Map.entry("StaleToken", (s, m) -> new StaleToken(s, "StaleToken", m)),
          Map.entry("MissingToken", (s, m) -> new MissingToken(s, "MissingToken", m)),
          Map.entry("InvalidToken", (s, m) -> new InvalidToken(s, "InvalidToken", m)),
          Map.entry("StreamHold", (s, m) -> new StreamHold(s, "StreamHold", m)),
          Map.entry("TtlWithStream", (s, m) -> new TtlWithStream(s, "TtlWithStream", m)),
          Map.entry("InvalidHold", (s, m) -> new InvalidHold(s, "InvalidHold", m)),
          Map.entry("InvalidMode", (s, m) -> new InvalidMode(s, "InvalidMode", m)),
          Map.entry("NotHeld", (s, m) -> new NotHeld(s, "NotHeld", m)),
          Map.entry("LockLost", (s, m) -> new LockLost(s, "LockLost", m)),
          Map.entry("PermitsMismatch", (s, m) -> new PermitsMismatch(s, "PermitsMismatch", m)),
          Map.entry("MissingPermits", (s, m) -> new MissingPermits(s, "MissingPermits", m)),
          Map.entry("InvalidPermits", (s, m) -> new InvalidPermits(s, "InvalidPermits", m)),
          Map.entry("NotPassed", (s, m) -> new NotPassed(s, "NotPassed", m)),
          Map.entry("PartiesMismatch", (s, m) -> new PartiesMismatch(s, "PartiesMismatch", m)),
          Map.entry("MissingParties", (s, m) -> new MissingParties(s, "MissingParties", m)),
          Map.entry("InvalidParties", (s, m) -> new InvalidParties(s, "InvalidParties", m)),
          Map.entry("NotLeader", (s, m) -> new NotLeader(s, "NotLeader", m)),
          Map.entry("NoElection", (s, m) -> new NoElection(s, "NoElection", m)),
          Map.entry("UnknownElection", (s, m) -> new UnknownElection(s, "UnknownElection", m)),
          Map.entry("FollowWithWait", (s, m) -> new FollowWithWait(s, "FollowWithWait", m)),
          Map.entry("InvalidFollow", (s, m) -> new InvalidFollow(s, "InvalidFollow", m)),
          Map.entry("CampaignInProgress", (s, m) -> new CampaignInProgress(s, "CampaignInProgress", m)),
          Map.entry("CandidacyAlways", (s, m) -> new CandidacyAlways(s, "CandidacyAlways", m)),
          Map.entry("NotSteppingDown", (s, m) -> new NotSteppingDown(s, "NotSteppingDown", m)),
          Map.entry("ShuttingDown", (s, m) -> new ShuttingDown(s, "ShuttingDown", m)),
          Map.entry("AppUnhealthy", (s, m) -> new AppUnhealthy(s, "AppUnhealthy", m)),
          Map.entry("NotConnected", (s, m) -> new NotConnected(s, "NotConnected", m)),
          Map.entry("SessionSuspended", (s, m) -> new SessionSuspended(s, "SessionSuspended", m)),
          Map.entry("SessionLost", (s, m) -> new SessionLost(s, "SessionLost", m)),
          Map.entry("EnsembleError", (s, m) -> new EnsembleError(s, "EnsembleError", m)),
          Map.entry("NodeVanished", (s, m) -> new NodeVanished(s, "NodeVanished", m)),
          Map.entry("InvalidName", (s, m) -> new InvalidName(s, "InvalidName", m)),
          Map.entry("InvalidDuration", (s, m) -> new InvalidDuration(s, "InvalidDuration", m)),
          Map.entry("InvalidQuery", (s, m) -> new InvalidQuery(s, "InvalidQuery", m)),
          Map.entry("UnknownParameter", (s, m) -> new UnknownParameter(s, "UnknownParameter", m)),
          Map.entry("DuplicateParameter", (s, m) -> new DuplicateParameter(s, "DuplicateParameter", m)),
          Map.entry("BadBody", (s, m) -> new BadBody(s, "BadBody", m)),
          Map.entry("PayloadTooLarge", (s, m) -> new PayloadTooLarge(s, "PayloadTooLarge", m)),
          Map.entry("NotFound", (s, m) -> new NotFound(s, "NotFound", m)),
          Map.entry("MethodNotAllowed", (s, m) -> new MethodNotAllowed(s, "MethodNotAllowed", m)),
          Map.entry("ProbePortReadOnly", (s, m) -> new ProbePortReadOnly(s, "ProbePortReadOnly", m)));

  /** The sidecar's documented error codes this client has a class for (BY_CODE's keys). */
  public static java.util.Set<String> codes() {
    return BY_CODE.keySet();
  }

  /** The error of an answer: the code's own class, else BatonException. */
  static BatonException of(int status, String code, String message) {
    BiFunction<Integer, String, BatonException> make = BY_CODE.get(code);
    return make == null ? new BatonException(status, code, message) : make.apply(status, message);
  }
}
