"""Which `pattern`s jsonschema-rs may run with its own regex engine, and how.

jsonschema's verdict on `pattern` is Python's `re.search(pattern, string)`.
jsonschema-rs reads a pattern as ECMA-262 and runs it with Rust's regex engine, which
differs from `re` in many corners: `$` (Python's also matches before a trailing
newline), `.` (ECMA's also stops at `\\r`, U+2028, U+2029), `\\d` / `\\w` / `\\s` / `\\b`
(Unicode in Python, ASCII in ECMA), lookarounds, backreferences, inline flags, nested
classes and set operations inside `[...]`, and what an unescaped `{`, `}` or `]` means.

`translate` accepts only a small subset whose meaning is the same in both engines,
and returns the text to give jsonschema-rs (None: outside the subset, keep Python's
`re`). The subset:

- literal ASCII letters, digits and ``_ - : @ / , = ! < > ' " % ; space``;
  escapes of the punctuation ``. ^ $ * + ? ( ) [ ] { } | \\ /`` and ``\\n \\t \\r``;
- `.`, given to Rust as `[^\\n]` (any character but a newline, as in `re`);
- classes `[...]` / `[^...]` of those characters, escapes and ranges between two
  letters or two digits (`a-z`, `0-9`), `-` also literally first or last; no `[`,
  `&` or `~` inside (Rust's nested classes and set operations);
- groups `(...)` and `(?:...)` with alternatives `|` inside;
- quantifiers `?`, `*`, `+`, `{n}`, `{n,}`, `{n,m}` (n <= m <= 1000), greedy only,
  after an atom;
- `^` only as the first character and `$` only as the last (neither with a `|`
  outside groups). `X$` is given to Rust as `X\\n?$`: a match of X may end at the
  end of the string or just before one final newline, which is exactly what `$`
  means in `re` (X has no anchors, lookarounds or word boundaries, so where a match
  of X may end does not depend on what follows it).

tests/schema/test_native.py compares jsonschema-rs with `re.search` on generated
patterns and strings (newlines, `\\r`, U+2028, Unicode digits and letters, ...).
"""

from __future__ import annotations

LITERALS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:@/,=!<>'\"%; "
)
ESCAPED = frozenset(".^$*+?()[]{}|\\/")
CONTROL_ESCAPES = frozenset("ntr")
# inside [...]: the literals but `-`, plus punctuation that is literal there in both
CLASS_LITERALS = (LITERALS - {"-"}) | frozenset(".*+?(){}|$")
REPEAT_MAX = 1000


class _Unsafe(Exception):
    """The pattern is outside the subset."""


def translate(pattern: str) -> str | None:
    """The pattern to give jsonschema-rs for the same verdicts as `re.search`, or None."""
    try:
        return _Parser(pattern).top()
    except _Unsafe:
        return None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        if self.at >= len(self.text):
            raise _Unsafe
        char = self.text[self.at]
        self.at += 1
        return char

    def top(self) -> str:
        text = self.text
        start = "^" if text.startswith("^") else ""
        end = ""
        if text.endswith("$") and len(text) > len(start):
            before = text[len(start): -1]
            if (len(before) - len(before.rstrip("\\"))) % 2 == 0:  # not `\$`
                end = "$"
        self.text = text[len(start): len(text) - len(end)]
        body = self.alternatives(top=True)
        if self.at != len(self.text):
            raise _Unsafe  # an unbalanced `)`
        if (start or end) and len(body) > 1:
            raise _Unsafe
        return start + "|".join(body) + ("\\n?$" if end else "")

    def alternatives(self, top: bool = False) -> list[str]:
        out = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            out.append(self.sequence())
        if not top and self.peek() != ")":
            raise _Unsafe
        return out

    def sequence(self) -> str:
        out = []
        while self.peek() not in ("", "|", ")"):
            out.append(self.atom())
            out.append(self.quantifier())
        return "".join(out)

    def atom(self) -> str:
        char = self.take()
        if char in LITERALS:
            return char
        if char == "\\":
            return self.escape()
        if char == ".":
            return "[^\\n]"
        if char == "[":
            return self.char_class()
        if char == "(":
            prefix = "("
            if self.peek() == "?":
                if self.text[self.at: self.at + 2] != "?:":
                    raise _Unsafe  # lookarounds, named groups, inline flags
                self.at += 2
                prefix = "(?:"
            inner = self.alternatives()
            self.take()  # the `)`
            return prefix + "|".join(inner) + ")"
        raise _Unsafe  # `^`/`$` inside, a stray quantifier, `{`, `}`, `]`, non-ASCII, ...

    def escape(self) -> str:
        char = self.take()
        if char in ESCAPED or char in CONTROL_ESCAPES:
            return "\\" + char
        raise _Unsafe  # classes (\d \w \s), anchors (\b \A \Z), backreferences, ...

    def quantifier(self) -> str:
        char = self.peek()
        if char in ("?", "*", "+"):
            self.at += 1
            out = char
        elif char == "{":
            close = self.text.find("}", self.at)
            if close < 0:
                raise _Unsafe
            inside = self.text[self.at + 1: close]
            low, _, high = inside.partition(",")
            if not _digits(low) or (high and not _digits(high)):
                raise _Unsafe
            if int(low) > REPEAT_MAX or (high and not int(low) <= int(high) <= REPEAT_MAX):
                raise _Unsafe
            self.at = close + 1
            out = "{" + inside + "}"
        else:
            return ""
        if self.peek() in ("?", "*", "+", "{"):
            raise _Unsafe  # lazy, possessive or repeated quantifiers
        return out

    def char_class(self) -> str:
        out = ["["]
        if self.peek() == "^":
            self.at += 1
            out.append("^")
        items: list[str] = []
        while True:
            char = self.take()
            if char == "]":
                break
            if char == "-":
                if items and self.peek() != "]":
                    raise _Unsafe  # `-` only first or last, or in a range
                items.append("\\-")
                continue
            if char == "\\" and self.peek() == "-":
                self.at += 1
                item = "\\-"
            elif char == "\\":
                item = self.escape()
            elif char in CLASS_LITERALS:
                item = char
            else:
                raise _Unsafe  # `[`, `&`, `~`, `^` not first, non-ASCII, ...
            if self.peek() == "-" and self.text[self.at + 1: self.at + 2] not in ("]", ""):
                self.at += 1
                high = self.take()
                if not _same_kind_range(item, high):
                    raise _Unsafe
                item = f"{item}-{high}"
            items.append(item)
        if not items:
            raise _Unsafe
        out.extend(items)
        out.append("]")
        return "".join(out)


def _digits(text: str) -> bool:
    return 0 < len(text) <= 4 and all("0" <= c <= "9" for c in text)


def _same_kind_range(low: str, high: str) -> bool:
    for first, last in (("a", "z"), ("A", "Z"), ("0", "9")):
        if first <= low <= last and first <= high <= last:
            return low <= high
    return False
