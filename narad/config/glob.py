"""Redis's glob over text, case-insensitive: how CONFIG GET matches setting names.

It keeps Redis's edge cases (stringmatchlen) and, like it, gives up on trying longer
matches for earlier stars once a star's rest matched no suffix. Key patterns
(case-sensitive, over bytes) are narad/commands/keys.py's.
"""

from __future__ import annotations


def glob_match(pattern: str, name: str) -> bool:
    """Redis's glob (stringmatchlen), case-insensitive: * ? [abc] [^a] [a-z] and \\x.

    As in Redis, an unclosed [ ends at the end of the pattern, and a character escaped
    inside brackets compares case-sensitively.
    """
    return _glob(pattern, 0, name, 0, [False])


def _glob(pat: str, p: int, text: str, s: int, give_up: list[bool]) -> bool:
    # give_up[0]: a '*' found that the rest of the pattern matches no suffix, so
    # trying longer matches for earlier stars is pointless (keeps this linear-ish).
    while p < len(pat) and s < len(text):
        c = pat[p]
        if c == "*":
            return _glob_star(pat, p, text, s, give_up)
        if c == "[":
            p, ok = _glob_class(pat, p + 1, text[s])
            if not ok:
                return False
        elif c != "?":
            if c == "\\" and p + 1 < len(pat):
                p += 1
            if pat[p].lower() != text[s].lower():
                return False
        p += 1
        s += 1
        if s == len(text):
            while p < len(pat) and pat[p] == "*":
                p += 1
    return p == len(pat) and s == len(text)


def _glob_star(pat: str, p: int, text: str, s: int, give_up: list[bool]) -> bool:
    while p + 1 < len(pat) and pat[p + 1] == "*":
        p += 1
    if p + 1 == len(pat):
        return True
    for start in range(s, len(text)):
        if _glob(pat, p + 1, text, start, give_up):
            return True
        if give_up[0]:
            return False
    give_up[0] = True
    return False


def _glob_class(pat: str, p: int, ch: str) -> tuple[int, bool]:
    """Match `ch` against the bracket class starting after '['.

    Returns the index of the closing ']' (or of the last character when unclosed)
    and whether `ch` matched.
    """
    negate = p < len(pat) and pat[p] == "^"
    p += negate
    matched = False
    while True:
        left = len(pat) - p
        if left >= 2 and pat[p] == "\\":
            p += 1
            matched |= pat[p] == ch
        elif left and pat[p] == "]":
            break
        elif not left:
            p -= 1
            break
        elif left >= 3 and pat[p + 1] == "-":
            low, high = sorted((pat[p], pat[p + 2]))
            matched |= low.lower() <= ch.lower() <= high.lower()
            p += 2
        else:
            matched |= pat[p].lower() == ch.lower()
        p += 1
    return p, matched != negate
