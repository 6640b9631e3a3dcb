"""The ``vlgrpo.patches`` logger (imported only when something is applied or fails, never at start-up).

Records go through :mod:`logging` as usual. So that the per-process "applied" line is visible in Ray and vLLM
workers, whose root logger often has no handler, a stderr handler is attached to this logger only when neither
it nor the root logger has one.
"""

from __future__ import annotations

import logging
import sys

NAME = "vlgrpo.patches"


def logger() -> logging.Logger:
    log = logging.getLogger(NAME)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [pid %(process)d] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    return log
