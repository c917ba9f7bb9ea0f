"""kazoo Lock: the second contender acquires only after the first releases."""

import threading

from common import Observed, check, close, connect, hosts_from_argv, wait

hosts = hosts_from_argv()
first = connect(hosts)
second = connect(hosts)
first_lock = first.Lock("/kazoo-lock", "first")
second_lock = second.Lock("/kazoo-lock", "second")

check(first_lock.acquire(timeout=30), "first contender did not get a free lock")
history = []
history_lock = threading.Lock()
acquired = threading.Event()


def contend():
    if second_lock.acquire(timeout=30):
        with history_lock:
            history.append("second acquired")
        acquired.set()


worker = threading.Thread(target=contend)
worker.start()

# The second contender is queued once its node sits beside the first one's.
lock_nodes = Observed()
first.ChildrenWatch("/kazoo-lock", lock_nodes.append)
lock_nodes.wait_until(lambda children: len(children) == 2, "the second contender to queue")
check(first_lock.contenders() == ["first", "second"], f"contenders {first_lock.contenders()}")
check(not acquired.is_set(), "second contender acquired a held lock")

with history_lock:
    history.append("first released")
first_lock.release()
wait(acquired, "the second contender to acquire")
worker.join(30)
check(history == ["first released", "second acquired"], f"history {history}")
check(second_lock.contenders() == ["second"], f"contenders after hand-over {second_lock.contenders()}")
second_lock.release()
check(second.get_children("/kazoo-lock") == [], "lock nodes left behind")

close(first)
close(second)
print("lock: ok")
