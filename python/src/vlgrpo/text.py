"""Messages that stay one line and show what they name.

Paths and values in messages come from users, folders and files: a newline in a path splits "one line per
problem" in two, a carriage return or an ANSI escape (ESC, or the C1 CSI byte U+009B) rewrites what the terminal
shows, a bidirectional override (U+202A..U+202E, U+2066..U+2069) reorders it. :func:`one_line` writes every such
character as its Python escape (``\\n``, ``\\x1b``, ``\\u2028``) and leaves all other text as it is.

Standard library only.
"""

from __future__ import annotations

import unicodedata

_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` with control characters (Unicode category Cc: C0, DEL, C1), line and paragraph separators (Zl, Zp)
    and bidirectional controls replaced by their escapes; the result has no line break of any kind."""
    out = []
    for ch in text:
        if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)
