"""Names that `docker/lock.sh` leaves out of a lock: what the base image owns.

Input: the base constraints file and pass 1's resolution (uv ``--annotation-style line``).
Output (stdout): one name a line: every ``# expect:`` / ``# exclude:`` name of the constraints file, and,
iteratively, every package of pass 1 that is required only by packages already left out (torch's
nvidia-* / triton wheels, vLLM's own dependencies). Standard library only.
"""

from __future__ import annotations

import re
import sys


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(constraints: str, full: str) -> int:
    owned: set[str] = set()
    for line in open(constraints, encoding="utf-8"):
        m = re.match(r"#\s*(expect|exclude):\s*([A-Za-z0-9._-]+)", line)
        if m:
            owned.add(canon(m.group(2)))
    via: dict[str, set[str]] = {}
    for line in open(full, encoding="utf-8"):
        m = re.match(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==\S+\s*#\s*via\s+(.*)", line)
        if m:
            via[canon(m.group(1))] = {
                canon(v.strip()) if not v.strip().startswith("-") else v.strip() for v in m.group(3).split(",")
            }
    changed = True
    while changed:
        changed = False
        for name, parents in via.items():
            if name not in owned and parents and parents <= owned:
                owned.add(name)
                changed = True
    print("\n".join(sorted(owned)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
