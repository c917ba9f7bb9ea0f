"""kazoo transactions (multi): all operations apply, or none."""

from kazoo.exceptions import BadVersionError, RolledBackError
from kazoo.protocol.states import ZnodeStat

from common import check, close, connect, hosts_from_argv

hosts = hosts_from_argv()
client = connect(hosts)
client.create("/kazoo-tx", b"start")
client.create("/kazoo-tx/old")

tx = client.transaction()
tx.create("/kazoo-tx/new", b"n")
tx.check("/kazoo-tx", 0)
tx.set_data("/kazoo-tx", b"changed", version=0)
tx.delete("/kazoo-tx/old")
results = tx.commit()
check(len(results) == 4, f"results {results}")
check(results[0] == "/kazoo-tx/new" and results[1] is True and results[3] is True, f"results {results}")
check(isinstance(results[2], ZnodeStat) and results[2].version == 1, f"set_data result {results[2]}")
check(client.get_children("/kazoo-tx") == ["new"], f"children {client.get_children('/kazoo-tx')}")

tx = client.transaction()
tx.create("/kazoo-tx/never")
tx.check("/kazoo-tx", 99)
tx.set_data("/kazoo-tx", b"never")
results = tx.commit()
check(isinstance(results[0], RolledBackError), f"first op of a failed transaction: {results}")
check(isinstance(results[1], BadVersionError), f"failing op: {results}")
check(client.exists("/kazoo-tx/never") is None, "failed transaction created a node")
value, stat = client.get("/kazoo-tx")
check(value == b"changed" and stat.version == 1, f"failed transaction changed data: {value!r} {stat}")

close(client)
print("transaction: ok")
