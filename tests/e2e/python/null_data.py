"""Null data (jute buffer length -1) stays apart from empty data, as ZooKeeper keeps it: create,
setData, getData, multi and multiRead. kazoo sends None as length -1 and reads -1 back as None.
Its transaction API refuses None and it has no multiRead, so those requests are built from
kazoo's protocol classes here."""

from collections import namedtuple

from kazoo.protocol.serialization import (
    Create,
    GetChildren,
    GetData,
    MultiHeader,
    SetData,
    int_struct,
    read_buffer,
    read_string,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from common import WAIT_SECONDS, check, close, connect, hosts_from_argv


class MultiRead(namedtuple("MultiRead", "operations")):
    """ZooKeeper's multiRead (opcode 22) over GetData and GetChildren requests: the data of a
    getData result, or the list of children, or the error code of a failed op."""

    type = 22

    def serialize(self):
        b = bytearray()
        for op in self.operations:
            b.extend(MultiHeader(op.type, False, -1).serialize() + op.serialize())
        return b + MultiHeader(-1, True, -1).serialize()

    @classmethod
    def deserialize(cls, buffer, offset):
        results = []
        header, offset = MultiHeader.deserialize(buffer, offset)
        while not header.done:
            if header.type == GetData.type:
                data, offset = read_buffer(buffer, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                offset += stat_struct.size
                results.append((data, stat))
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(count):
                    child, offset = read_string(buffer, offset)
                    children.append(child)
                results.append(children)
            else:
                results.append(int_struct.unpack_from(buffer, offset)[0])
                offset += int_struct.size
            header, offset = MultiHeader.deserialize(buffer, offset)
        return results


def multi_read(client, *paths):
    result = client.handler.async_result()
    client._call(MultiRead([GetData(p, None) for p in paths]), result)
    return result.get(timeout=WAIT_SECONDS)


def expect(client, path, data):
    value, stat = client.get(path)
    check(value == data, f"{path}: data {value!r}, expected {data!r}")
    check(stat.dataLength == len(data or b""), f"{path}: dataLength {stat.dataLength} for {data!r}")
    return stat


hosts = hosts_from_argv()
client = connect(hosts)
client.create("/kazoo-null", b"")
client.create("/kazoo-null/n", None)
client.create("/kazoo-null/e", b"")
expect(client, "/kazoo-null/n", None)
expect(client, "/kazoo-null/e", b"")
check(client.exists("/kazoo-null/n").dataLength == 0, "exists: dataLength of null data")
# The nodes every tree starts with hold empty data, not null.
expect(client, "/", b"")
expect(client, "/zookeeper", b"")

client.set("/kazoo-null/e", None)
expect(client, "/kazoo-null/e", None)
client.set("/kazoo-null/e", b"")
expect(client, "/kazoo-null/e", b"")
client.set("/kazoo-null/n", b"x")
expect(client, "/kazoo-null/n", b"x")
stat = client.set("/kazoo-null/n", None)
check(stat.version == 2 and stat.dataLength == 0, f"setData null: {stat}")
expect(client, "/kazoo-null/n", None)

tx = client.transaction()
tx._add(Create("/kazoo-null/t", None, OPEN_ACL_UNSAFE, 0))
tx._add(SetData("/kazoo-null/e", None, -1))
results = tx.commit()
check(results[0] == "/kazoo-null/t" and isinstance(results[1], ZnodeStat), f"multi results {results}")
expect(client, "/kazoo-null/t", None)
expect(client, "/kazoo-null/e", None)
client.set("/kazoo-null/e", b"")

results = multi_read(client, "/kazoo-null/n", "/kazoo-null/e", "/kazoo-null/t", "/kazoo-null/absent")
check(len(results) == 4, f"multiRead results {results}")
(n, n_stat), (e, _), (t, _), absent = results
check(n is None and n_stat.dataLength == 0 and n_stat.version == 2, f"multiRead of null data: {results[0]}")
check(e == b"" and t is None, f"multiRead of empty and null data: {results[1:3]}")
check(absent == -101, f"multiRead of a missing node: {absent}")

close(client)
print("null_data: ok")
