"""``chatplatform.pubsub``'s parts that need no server: RESP packing (checked against
redis-py's own packer) and reading channels-redis host specs."""

from __future__ import annotations

import pytest
from redis.connection import Connection

from chatplatform.pubsub import Target, pack_command, subscriber_target


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 1, "chatplatform:events:r1", 86400, "asgi__group__thread.1", "7-1",
     '{"type":"text.delta","delta":"é ☃"}', b"\x80\x00\r\n"),
    ("PING",),
    ("SUBSCRIBE", ""),
])
def test_pack_command_matches_redis_py(args):
    assert pack_command(*args) == b"".join(Connection().pack_command(*args))


def test_pack_command_refuses_other_types():
    with pytest.raises(TypeError, match="str, bytes or int, not float"):
        pack_command("SET", "k", 1.5)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ({"address": "redis://u:p@h:7000/3", "socket_timeout": 30, "socket_connect_timeout": 2},
         Target(host="h", port=7000, username="u", password="p", connect_timeout_s=2.0, reply_timeout_s=5.0)),
        ({"address": ("h2", 7001), "password": "pw"}, Target(host="h2", port=7001, password="pw")),
        ({"host": "h3", "port": 7002}, Target(host="h3", port=7002)),
        ({"address": "unix:///run/redis.sock?db=2"}, Target(path="/run/redis.sock")),
        ({"address": "rediss://h4:6380/0?ssl_cert_reqs=none"},
         Target(host="h4", port=6380, ssl={"cert_reqs": "none"})),
        # Through Sentinel: the master is asked for at every connect (chatplatform.redis_clients).
        ({"sentinels": [("s", 26379)], "master_name": "m"}, Target(master_name="m", sentinels=(("s", 26379),))),
        ({"sentinels": [("s", 26379)]}, None),  # Sentinels without a master name

        ({"address": "http://nope"}, None),
    ],
)
def test_subscriber_target_reads_channels_redis_host_specs(host, expected):
    assert subscriber_target(host) == expected
