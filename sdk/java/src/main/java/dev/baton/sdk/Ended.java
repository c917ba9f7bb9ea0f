package dev.baton.sdk;

/**
 * Why a lock, permit or term of leadership ended: {@link Lock#cause()}, {@link Term#cause()}, and
 * what {@link Lock#check()} / {@link Term#check()} throw once it has.
 */
public class Ended extends Exception {
  private static final long serialVersionUID = 1L;

  Ended(String message, Throwable cause) {
    super(message, cause);
  }

  /** The sidecar said the grant or term ended, its stream broke, or a renewal failed. */
  public static final class Lost extends Ended {
    private static final long serialVersionUID = 1L;

    Lost(String message, Throwable cause) {
      super(message, cause);
    }
  }

  /** validUntil passed without fresher word: nothing promises the grant or term any more. */
  public static final class ValidUntilPassed extends Ended {
    private static final long serialVersionUID = 1L;

    ValidUntilPassed(String message) {
      super(message, null);
    }
  }

  /** Released by the app, or by the sidecar. */
  public static final class Released extends Ended {
    private static final long serialVersionUID = 1L;

    Released(String message) {
      super(message, null);
    }
  }

  /** The sidecar's session was cut off: a leader stops acting at once. */
  public static final class Suspended extends Ended {
    private static final long serialVersionUID = 1L;

    Suspended(String message) {
      super(message, null);
    }
  }

  /** The sidecar got SIGTERM and hands leadership over. */
  public static final class SteppingDown extends Ended {
    private static final long serialVersionUID = 1L;

    SteppingDown(String message) {
      super(message, null);
    }
  }
}
