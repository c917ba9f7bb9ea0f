"""kazoo DataWatch and ChildrenWatch observe every change, in order."""

from common import Observed, check, close, connect, hosts_from_argv

hosts = hosts_from_argv()
client = connect(hosts)
writer = connect(hosts)

client.create("/kazoo-data", b"v0")
data = Observed()
client.DataWatch("/kazoo-data", lambda value, stat: data.append(value))
data.wait_for_last(b"v0", "the initial value")
for i in range(1, 6):
    value = f"v{i}".encode()
    writer.set("/kazoo-data", value)
    data.wait_for_last(value, f"data {value!r}")
writer.delete("/kazoo-data")
data.wait_for_last(None, "the deletion")
expected = [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5", None]
check(data.values() == expected, f"DataWatch saw {data.values()}")

client.create("/kazoo-kids")
kids = Observed()
client.ChildrenWatch("/kazoo-kids", lambda children: kids.append(sorted(children)))
kids.wait_for_last([], "the initial children")
steps = [("create", "a", ["a"]), ("create", "b", ["a", "b"]), ("create", "c", ["a", "b", "c"]), ("delete", "b", ["a", "c"])]
for action, name, after in steps:
    if action == "create":
        writer.create(f"/kazoo-kids/{name}")
    else:
        writer.delete(f"/kazoo-kids/{name}")
    kids.wait_for_last(after, f"children {after}")
expected = [[], ["a"], ["a", "b"], ["a", "b", "c"], ["a", "c"]]
check(kids.values() == expected, f"ChildrenWatch saw {kids.values()}")

close(client)
close(writer)
print("watches: ok")
