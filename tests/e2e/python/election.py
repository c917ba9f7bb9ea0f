"""kazoo Election: when the leader's session closes, the other candidate leads."""

import threading

from common import Observed, check, close, connect, hosts_from_argv, wait

hosts = hosts_from_argv()
clients = {name: connect(hosts) for name in ("one", "two")}
elections = {name: client.Election("/kazoo-election", name) for name, client in clients.items()}
leading = {name: threading.Event() for name in clients}
step_down = {name: threading.Event() for name in clients}


def campaign(name):
    def lead():
        leading[name].set()
        step_down[name].wait(60)

    try:
        elections[name].run(lead)
    except Exception:  # noqa: BLE001 - "one" loses its connection while leading, by design
        pass


threads = {name: threading.Thread(target=campaign, args=(name,)) for name in clients}
threads["one"].start()
wait(leading["one"], "the first candidate to lead")
threads["two"].start()

candidate_nodes = Observed()
clients["two"].ChildrenWatch("/kazoo-election", candidate_nodes.append)
candidate_nodes.wait_until(lambda children: len(children) == 2, "the second candidate to queue")
check(elections["two"].contenders() == ["one", "two"], f"contenders {elections['two'].contenders()}")
check(not leading["two"].is_set(), "two candidates lead at once")

# Close the leader's session while it still leads: its ephemeral node goes, "two" takes over.
close(clients["one"])
wait(leading["two"], "the second candidate to lead after the leader's session closed")
check(elections["two"].contenders() == ["two"], f"contenders after failover {elections['two'].contenders()}")

for name in clients:
    step_down[name].set()
for thread in threads.values():
    thread.join(30)
close(clients["two"])
print("election: ok")
