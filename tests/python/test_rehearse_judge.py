"""The rehearsal's verdict on a failed process group names the rank at fault, not the ranks that waited for it.

The error texts are the ones torch 2.x's gloo backend gave the ranks of a 6-rank group on a 3-node loopback Ray
cluster whose third node had ``GLOO_SOCKET_IFNAME=nosuch0`` (tests/python/ray/test_rehearsal_ray.py, seen in a
clean-clone run): the two ranks on that node fail at once; of the four healthy ranks, two time out on the store
and two see the store's master close the connection. Which of the two a healthy rank gets depends on timing.
"""

from vlgrpo import rehearse

BAD_IF = (
    "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
    "ifa != nullptr. Unable to find address for: nosuch0"
)
STORE_TIMEOUT = "DistStoreError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/4"
CLOSED = (
    "DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown "
    "or crash?"
)


def _judge(errors):
    infos = [
        {"ip": f"127.0.0.{2 + rank // 2}", "hostname": "vm", "role": "trainer", "rank": rank, "env": {}}
        for rank in range(len(errors))
    ]
    results = [{"error": e, "master": "127.0.0.2:41773"} for e in errors]
    out = rehearse.Result()
    ok = rehearse._judge_collective("stage process group", infos, results, len(errors), out)
    return ok, out.problems


def test_ranks_whose_connection_was_closed_are_named_as_waiting_for_the_failed_ones():
    ok, problems = _judge([STORE_TIMEOUT, CLOSED, STORE_TIMEOUT, CLOSED, BAD_IF, BAD_IF])
    assert not ok and len(problems) == 6
    for line in problems[:4]:
        assert "it waited for the rank(s) that failed" in line, line
    for line in problems[4:]:
        assert "Unable to find address for: nosuch0" in line and "it waited" not in line, line


def test_a_closed_connection_alone_is_reported_as_it_is():
    # nobody failed first: no rank is said to have waited for another
    ok, problems = _judge([CLOSED, STORE_TIMEOUT])
    assert not ok and not any("it waited" in line for line in problems)
