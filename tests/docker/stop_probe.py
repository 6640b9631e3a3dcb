"""Stop probe for tests/docker/run.sh: stands in for the trainer process of a compose service.

Prints PID 1's command (compose.yaml's ``init: true`` makes it docker-init/tini, which forwards signals),
then waits; on SIGTERM prints one line with the signal's name and exits 0. Exits 3 after 300 s if no
signal came (the test then fails on the exit code). Standard library only.
"""

import signal
import sys
import time


def on_term(signum, _frame):
    print(f"stop-probe: received {signal.Signals(signum).name}", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
with open("/proc/1/cmdline", "rb") as fh:
    pid1 = fh.read().split(b"\0")[0].decode()
print(f"stop-probe: ready, pid {__import__('os').getpid()}, pid 1 is {pid1}", flush=True)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    time.sleep(0.2)
print("stop-probe: no signal within 300 s", flush=True)
sys.exit(3)
