"""Digest authentication and ACLs through kazoo."""

from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from common import check, close, connect, hosts_from_argv

hosts = hosts_from_argv()
owner = connect(hosts, auth_data=[("digest", "kazoo:s3cret")])
acl = make_digest_acl("kazoo", "s3cret", all=True)
owner.create("/kazoo-acl", b"guarded", acl=[acl])
acls, _ = owner.get_acls("/kazoo-acl")
check(len(acls) == 1 and acls[0].id.scheme == "digest" and acls[0].id.id == acl.id.id, f"ACL {acls}")

stranger = connect(hosts)
for name, operation in [("get", lambda: stranger.get("/kazoo-acl")), ("set", lambda: stranger.set("/kazoo-acl", b"x"))]:
    try:
        operation()
    except NoAuthError:
        pass
    else:
        raise AssertionError(f"unauthenticated {name} succeeded")

stranger.add_auth("digest", "kazoo:s3cret")
value, _ = stranger.get("/kazoo-acl")
check(value == b"guarded", f"authenticated get returned {value!r}")

close(owner)
close(stranger)
print("acl_digest: ok")
