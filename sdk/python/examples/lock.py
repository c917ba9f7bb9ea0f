"""The README's lock example: hold lock db while this process lives, pass its token on."""

import baton

# --- README ---
with baton.Client().lock("db") as lock:  # held by a stream: dies with this process
    print("holding db with fencing token", lock.token, flush=True)  # lock.lost is set if it is lost
# --- README ---
