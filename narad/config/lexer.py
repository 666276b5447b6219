"""redis.conf's lexical rules: how redis-server splits a config line into arguments
(sdssplitargs) and how it quotes a string (sdscatrepr).

`split_args(quote(s)) == [s]` for every s, and `bare_or_quoted` writes an argument bare
only when it splits back the same. Arguments are text (`str`): bytes that are not UTF-8
are carried as surrogate escapes, so they encode back to the same bytes.
"""

from __future__ import annotations

_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale
_TOKEN_END = " \n\r\t"
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a"}
_REPR = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b"}
_HEX = "0123456789abcdefABCDEF"


def split_args(line: str) -> list[str] | None:
    """Split a config line as redis-server does (sdssplitargs); None on bad quoting.

    Arguments are separated by blanks. "double quotes" take \\n \\r \\t \\b \\a, \\xHH
    and \\<any char>; 'single quotes' take only \\'. A closing quote must be followed by
    a blank or the end of the line. Quotes may start inside an argument: a"b c" is
    one argument, `ab c`.
    """
    args: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _C_SPACE:
            i += 1
        if i >= n:
            return args
        token = _split_token(line, i)
        if token is None:
            return None
        text, i = token
        args.append(_normal(text))


def _split_token(line: str, i: int) -> tuple[str, int] | None:
    """One argument starting at `i`: its text and the index after it, or None."""
    out: list[str] = []
    quote = ""
    n = len(line)
    while True:
        c = line[i] if i < n else ""
        if quote == '"':
            if c == "\\" and line[i + 1 : i + 2] == "x" and _is_hex(line[i + 2 : i + 4]):
                out.append(_byte_char(int(line[i + 2 : i + 4], 16)))
                i += 3
            elif c == "\\" and i + 1 < n:
                i += 1
                out.append(_ESCAPES.get(line[i], line[i]))
            elif c == '"':
                if i + 1 < n and line[i + 1] not in _C_SPACE:
                    return None
                return "".join(out), i + 1
            elif not c:
                return None
            else:
                out.append(c)
        elif quote == "'":
            if c == "\\" and line[i + 1 : i + 2] == "'":
                i += 1
                out.append("'")
            elif c == "'":
                if i + 1 < n and line[i + 1] not in _C_SPACE:
                    return None
                return "".join(out), i + 1
            elif not c:
                return None
            else:
                out.append(c)
        elif not c or c in _TOKEN_END:
            return "".join(out), i + 1
        elif c in "\"'":
            quote = c
        else:
            out.append(c)
        i += 1


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(ch in _HEX for ch in pair)


def _byte_char(byte: int) -> str:
    """The character a raw byte stands for: itself if ASCII, else its surrogate escape."""
    return chr(byte) if byte < 0x80 else chr(0xDC00 + byte)


def _normal(text: str) -> str:
    """Join escaped bytes that form UTF-8 ("\\xc3\\xa9" becomes "é")."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")


def quote(text: str) -> str:
    """`text` in double quotes as redis-server writes strings (sdscatrepr):
    split_args(quote(s)) == [s] for every s."""
    out = ['"']
    for byte in text.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        if ch in _REPR:
            out.append(_REPR[ch])
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


def bare_or_quoted(text: str) -> str:
    """An argument as written in a config file: bare when that splits back the same."""
    if text and all(0x20 < ord(ch) < 0x7F and ch not in "\"'\\" for ch in text):
        return text
    return quote(text)
