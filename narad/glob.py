"""Redis's glob: the one pattern matcher of KEYS, SCAN MATCH, Q.LIST, COMMAND LIST
FILTERBY PATTERN, CONFIG GET and the sentinel's SENTINEL commands.

`match` is Redis 7.0's stringmatchlen (util.c) over bytes, with its edge cases: an
unclosed `[` class ends at the pattern's end, `[z-a]` is the range a-z (compared as
C's signed chars), `\\` escapes inside and outside classes, an empty string matches
only an empty pattern, and with `nocase` letters compare case-insensitively except a
character escaped inside a class. Like Redis it stops trying longer matches for
earlier stars once a star's rest matched no suffix, and like Redis 7.2 a pattern that
nests `*` deeper than MAX_STAR_NESTING matches nothing, so no pattern can exhaust the
interpreter's stack. Patterns of literals, `*` and `?` only (the common case) are
matched by a regex in C instead, with the same result.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

# Like Redis 7.2 (whose limit is 1000), a pattern that nests `*` deeper than this
# matches nothing, so that no pattern can exhaust the interpreter's stack.
MAX_STAR_NESTING = 300


def match(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Whether `string` matches the glob `pattern` (module doc)."""
    if pattern == b"*":
        return True
    if not string:
        return not pattern
    regex = _regex(pattern, nocase)
    if regex is not None:
        return regex.match(string) is not None
    return stringmatch(pattern, string, nocase)


def match_text(pattern: str, name: str) -> bool:
    """`match` for text names, case-insensitive: how CONFIG GET and the sentinel match
    setting and master names."""
    return match(pattern.encode(), name.encode(), nocase=True)


@lru_cache(maxsize=256)
def _regex(pattern: bytes, nocase: bool) -> re.Pattern[bytes] | None:
    """A regex equal to the glob for patterns of literals, `*` and `?` only; None for
    patterns with `[` or `\\`, which take `stringmatch`. fnmatch's translation puts
    each `*` segment in an atomic group, so matching stays linear however many stars
    a pattern has (no catastrophic backtracking)."""
    if b"[" in pattern or b"\\" in pattern:
        return None
    flags = re.IGNORECASE if nocase else 0
    return re.compile(fnmatch.translate(pattern.decode("latin-1")).encode("latin-1"), flags)


def stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """The line-by-line port of Redis's stringmatchlen (module doc)."""
    return _match(pattern, 0, string, 0, [False], 0, nocase)


def _lower(byte: int) -> int:
    return byte + 32 if 65 <= byte <= 90 else byte


def _match(
    p: bytes, pi: int, s: bytes, si: int, skip_longer: list[bool], depth: int, nocase: bool
) -> bool:
    if depth > MAX_STAR_NESTING:
        return False
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        ch = p[pi]
        if ch == 42:  # *
            while pi + 1 < plen and p[pi + 1] == 42:
                pi += 1
            if pi + 1 == plen:
                return True
            while si < slen:
                if _match(p, pi + 1, s, si, skip_longer, depth + 1, nocase):
                    return True
                if skip_longer[0]:
                    return False
                si += 1
            skip_longer[0] = True
            return False
        if ch == 63:  # ?
            si += 1
        elif ch == 91:  # [
            pi += 1
            negate = pi < plen and p[pi] == 94  # ^
            if negate:
                pi += 1
            matched = False
            c = s[si]
            while True:
                if pi < plen and p[pi] == 92 and plen - pi >= 2:  # \ escape: exact
                    pi += 1
                    if p[pi] == c:
                        matched = True
                elif pi < plen and p[pi] == 93:  # ]
                    break
                elif pi >= plen:  # unclosed: the class ends with the pattern
                    pi -= 1
                    break
                elif plen - pi >= 3 and p[pi + 1] == 45:  # a-z, compared as C's signed chars
                    low, high, x = p[pi], p[pi + 2], c
                    if nocase:
                        low, high, x = _lower(low), _lower(high), _lower(x)
                    start, end = sorted((_signed(low), _signed(high)))
                    pi += 2
                    if start <= _signed(x) <= end:
                        matched = True
                elif p[pi] == c or (nocase and _lower(p[pi]) == _lower(c)):
                    matched = True
                pi += 1
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if ch == 92 and plen - pi >= 2:  # \ escape
                pi += 1
            if p[pi] != s[si] and not (nocase and _lower(p[pi]) == _lower(s[si])):
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == 42:
                pi += 1
            break
    return pi >= plen and si == slen


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte
