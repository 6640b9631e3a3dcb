"""Pin the image digests of one lock file the way ``make pin-digests`` pins docker/base-digests.lock.

Usage: ``pin_lock.py LOCK`` — every ``<platform>\\t<image:tag>\\t<digest>`` line of LOCK gets the digest the
registry answers for its tag (``docker/pin_digests.py``: ``update`` with ``digest_of``); exit 1 when one is not
resolved. tests/docker/run.sh (step 1b) runs it over a lock naming the CI base pushed to a loopback registry.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docker"))
import pin_digests

if __name__ == "__main__":
    failed = pin_digests.update(Path(sys.argv[1]), pin_digests.digest_of, 1)
    for f in failed:
        print(f"pin_lock: NOT resolved: {f}", file=sys.stderr)
    sys.exit(1 if failed else 0)
