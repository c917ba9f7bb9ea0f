"""Ephemeral sequential nodes: 10-digit suffixes in order, owned by the session, gone with it."""

import re

from common import check, close, connect, hosts_from_argv

hosts = hosts_from_argv()
owner = connect(hosts)
observer = connect(hosts)
observer.create("/kazoo-es")

paths = [owner.create("/kazoo-es/member-", b"", ephemeral=True, sequence=True) for _ in range(3)]
check(paths == [f"/kazoo-es/member-{i:010d}" for i in range(3)], f"created {paths}")
for path in paths:
    check(re.fullmatch(r"/kazoo-es/member-\d{10}", path) is not None, f"bad name {path}")
    stat = observer.exists(path)
    check(stat is not None and stat.ephemeralOwner == owner.client_id[0], f"{path} owner {stat}")

close(owner)
check(observer.get_children("/kazoo-es") == [], f"ephemerals left: {observer.get_children('/kazoo-es')}")
close(observer)
print("ephemeral_sequential: ok")
