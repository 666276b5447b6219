"""Narad's one regex engine: which patterns it runs, and running them in linear time.

Every regex evaluation of the schema package goes through `search` (or through
jsonschema-rs given `translate`'s text and the `regex` crate's options), so no pattern
ever runs in Python's backtracking `re`: a `pattern`, a `patternProperties` or
`propertyNames` regex and the compatibility checker's matching all take time linear
in the string. A pattern outside the subset below is refused when a schema is checked
(`problem` says why, naming the construct).

jsonschema's verdict on `pattern` is Python's `re.search(pattern, string)`.
jsonschema-rs reads a pattern as ECMA-262 and runs it with Rust's regex engine, which
differs from `re` in many corners: `$` (Python's also matches before a trailing
newline), `.` (ECMA's also stops at `\\r`, U+2028, U+2029), `\\d` / `\\w` / `\\s` / `\\b`
(Unicode in Python, ASCII in ECMA), lookarounds, backreferences, inline flags, nested
classes and set operations inside `[...]`, and what an unescaped `{`, `}` or `]` means.

`translate` accepts only a small subset whose meaning is the same in both engines,
and returns the text to give jsonschema-rs (None: outside the subset, keep Python's
`re`). The subset:

- literal ASCII letters, digits and ``_ - : @ / , = ! < > ' " % ; # space``;
  escapes of the punctuation ``. ^ $ * + ? ( ) [ ] { } | \\ /`` and ``\\n \\t \\r``;
- `.`, given to Rust as `[^\\n]` (any character but a newline, as in `re`);
- the class escapes `\\d \\w \\s \\D \\W \\S` with Python's Unicode meaning,
  given to Rust as explicit classes of the code points `re` itself matches
  (`class_escape`), never as Rust's own escapes, whose Unicode tables differ;
- classes `[...]` / `[^...]` of those characters, escapes (class escapes too) and
  ranges between two letters or two digits (`a-z`, `0-9`), `-` also literally first
  or last; no `[`, `&` or `~` inside (Rust's nested classes and set operations);
- groups `(...)` and `(?:...)` with alternatives `|` inside;
- quantifiers `?`, `*`, `+`, `{n}`, `{n,}`, `{n,m}` (n <= m <= 1000), greedy only,
  after an atom;
- `^` only as the first character and `$` only as the last of a top-level
  alternative (`^a|b$` is `(?:^a)|(?:b$)` in both engines: `|` binds loosest).
  `X$` is given to Rust as `X\\n?$`: a match of X may end at the
  end of the string or just before one final newline, which is exactly what `$`
  means in `re` (X has no anchors, lookarounds or word boundaries, so where a match
  of X may end does not depend on what follows it).

Word boundaries `\\b \\B` stay outside: Python's boundary is defined by its `\\w`,
Rust's by Rust's own, and Rust has no lookaround to build Python's from the tables.

tests/schema/test_native.py compares jsonschema-rs with `re.search` on generated
patterns and strings (newlines, `\\r`, U+2028, digits, letters and spaces of several
scripts, lone surrogates, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

LITERALS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:@/,=!<>'\"%;# "
)
ESCAPED = frozenset(".^$*+?()[]{}|\\/")
CONTROL_ESCAPES = frozenset("ntr")
# inside [...]: the literals but `-`, plus punctuation that is literal there in both
CLASS_LITERALS = (LITERALS - {"-"}) | frozenset(".*+?(){}|$")
REPEAT_MAX = 1000
CLASS_ESCAPES = frozenset("dDwWsS")  # Python's meaning: see class_escape
CODE_POINTS = 0x110000


class _Unsafe(Exception):
    """The pattern is outside the subset; the message names the construct."""


def translate(pattern: str) -> str | None:
    """The pattern to give jsonschema-rs for the same verdicts as `re.search`, or None."""
    try:
        return _Parser(pattern).top()
    except _Unsafe:
        return None


class Unsupported(ValueError):
    """`search` was given a pattern outside the subset (a schema checked before this
    change may hold one): it has no linear-time meaning here."""


def search(pattern: str, text: str) -> bool:
    """`re.search(pattern, text) is not None`, in time linear in `text`, for a pattern
    of the subset; Unsupported for any other.

    A lone surrogate (Python strings can hold one, Rust's cannot) is given to Rust as
    U+FFFD, which every atom of the subset matches exactly when it matches a
    surrogate: literals are ASCII, and U+FFFD and the surrogates are in none of
    `\\d \\w \\s` (checked when their tables are built), so in all of `.`, `\\D \\W \\S`
    and the negated classes."""
    match = _matcher(pattern)
    try:
        return match(text)
    except UnicodeEncodeError:
        return match(_without_surrogates(text))


def problem(pattern: str) -> str | None:
    """Why `pattern` cannot be run here (outside the subset, or past the engine's own
    size limits), or None when `search` takes it."""
    reason = refusal(pattern)
    if reason is not None:
        return reason
    try:
        _matcher(pattern)
    except Exception:  # the translation is valid: only the engine's size limit is left
        return "a regex larger than the engine's compiled-size limit"
    return None


def regex_options() -> Any:
    """The options that make jsonschema-rs use Rust's linear-time `regex` crate."""
    return _jsonschema_rs().RegexOptions()


# A matcher of a pattern with a class escape holds 100-280 KiB once used: 256 of them
# bound this cache to well under 100 MiB, whatever patterns clients send.
@functools.lru_cache(maxsize=256)
def _matcher(pattern: str) -> Callable[[str], bool]:
    translated = translate(pattern)
    if translated is None:
        raise Unsupported(f"pattern {pattern!r} uses {refusal(pattern)}")
    validator = _jsonschema_rs().validator_for({"pattern": translated},
                                               pattern_options=regex_options())
    is_valid: Callable[[str], bool] = validator.is_valid
    return is_valid


@functools.cache
def _jsonschema_rs() -> Any:
    import jsonschema_rs  # type: ignore[import-not-found, unused-ignore]

    return jsonschema_rs


def _without_surrogates(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def refusal(pattern: str) -> str | None:
    """Why `pattern` is outside the subset (the construct, in a few words), or None."""
    try:
        _Parser(pattern).top()
    except _Unsafe as error:
        return str(error)
    return None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        if self.at >= len(self.text):
            raise _Unsafe("an unterminated group, class or escape")
        char = self.text[self.at]
        self.at += 1
        return char

    def top(self) -> str:
        body = self.alternatives(top=True)
        if self.at != len(self.text):
            raise _Unsafe("an unbalanced ')'")
        return "|".join(body)

    def alternatives(self, top: bool = False) -> list[str]:
        out = [self.sequence(top)]
        while self.peek() == "|":
            self.at += 1
            out.append(self.sequence(top))
        if not top and self.peek() != ")":
            raise _Unsafe("an unterminated group")
        return out

    def sequence(self, top: bool = False) -> str:
        """One alternative; at the top level it may start with `^` and end with `$`."""
        out = []
        if top and self.peek() == "^":
            self.at += 1
            out.append("^")
        while self.peek() not in ("", "|", ")"):
            if top and self.peek() == "$" and self.text[self.at + 1: self.at + 2] in ("", "|"):
                self.at += 1
                out.append("\\n?$")
                break
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
                    raise _Unsafe(_group_kind(self.text[self.at: self.at + 3]))
                self.at += 2
                prefix = "(?:"
            inner = self.alternatives()
            self.take()  # the `)`
            return prefix + "|".join(inner) + ")"
        raise _Unsafe(_atom_kind(char))

    def escape(self) -> str:
        char = self.take()
        if char in ESCAPED or char in CONTROL_ESCAPES:
            return "\\" + char
        if char in CLASS_ESCAPES:
            return "[" + class_escape(char) + "]"
        raise _Unsafe(_escape_kind(char))

    def quantifier(self) -> str:
        char = self.peek()
        if char in ("?", "*", "+"):
            self.at += 1
            out = char
        elif char == "{":
            close = self.text.find("}", self.at)
            if close < 0:
                raise _Unsafe("an unterminated '{'")
            inside = self.text[self.at + 1: close]
            low, _, high = inside.partition(",")
            if not _digits(low) or (high and not _digits(high)):
                raise _Unsafe(f"the repetition '{{{inside}}}'")
            if int(low) > REPEAT_MAX or (high and not int(low) <= int(high) <= REPEAT_MAX):
                raise _Unsafe(f"the repetition '{{{inside}}}' (counts up to {REPEAT_MAX}, "
                              "the lower first)")
            self.at = close + 1
            out = "{" + inside + "}"
        else:
            return ""
        if self.peek() in ("?", "*", "+", "{"):
            raise _Unsafe(f"the quantifier '{out}{self.peek()}' (lazy, possessive or "
                          "repeated quantifiers)")
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
                    raise _Unsafe("a '-' inside a class that is not first, last or a range")
                items.append("\\-")
                continue
            if char == "\\" and self.peek() == "-":
                self.at += 1
                item = "\\-"
            elif char == "\\" and self.peek() in CLASS_ESCAPES:
                letter = self.take()
                if self.peek() == "-" and self.text[self.at + 1: self.at + 2] not in ("]", ""):
                    raise _Unsafe(f"the class range '\\{letter}-' (a class escape cannot "
                                  "bound a range)")
                items.append(class_escape(letter))
                continue
            elif char == "\\":
                item = self.escape()
            elif char in CLASS_LITERALS:
                item = char
            else:
                raise _Unsafe(f"{_show(char)} inside a class")
            if self.peek() == "-" and self.text[self.at + 1: self.at + 2] not in ("]", ""):
                self.at += 1
                high = self.take()
                if not _same_kind_range(item, high):
                    raise _Unsafe(f"the class range '{item}-{high}' (only a-z, A-Z or 0-9 "
                                  "ranges)")
                item = f"{item}-{high}"
            items.append(item)
        if not items:
            raise _Unsafe("an empty class")
        out.extend(items)
        out.append("]")
        return "".join(out)


@functools.cache
def class_escape(letter: str) -> str:
    """What `\\<letter>` (d, w, s or their negations D, W, S) matches in a `re` str
    pattern without flags, as the ranges of a Rust class (without its brackets).

    Rust's `\\d \\w \\s` and `\\p{..}` come from other Unicode tables and
    definitions, so the ranges are Python's own: the code points `re` itself matches
    (`\\d` is str.isdecimal, `\\w` is isalnum or `_`, `\\s` is isspace, per
    character). A negation is the complement, without the surrogates a Rust class
    cannot hold (search gives Rust U+FFFD for one: see `_python_classes`)."""
    ranges = _python_classes()[letter.lower()]
    if letter.isupper():
        ranges = _without_surrogate_block(_complement(ranges))
    return "".join(f"\\x{{{low:X}}}" if low == high else f"\\x{{{low:X}}}-\\x{{{high:X}}}"
                   for low, high in ranges)


@functools.cache
def _python_classes() -> dict[str, list[tuple[int, int]]]:
    """The ranges of code points `re`'s `\\d`, `\\w` and `\\s` match, found by `re`
    itself in one scan of every code point (~0.2 s, once per process).

    Invariant `search` relies on: no surrogate and not U+FFFD is in any of them, so a
    lone surrogate and U+FFFD are in exactly the same classes of the subset (all the
    negated ones, none of the others) and matching either gives the same verdict."""
    import re  # `\\d+` and the like on a fixed text: linear, and never a schema's regex

    every = "".join(map(chr, range(CODE_POINTS)))
    classes = {letter: [(found.start(), found.end() - 1)
                        for found in re.finditer(f"\\{letter}+", every)]
               for letter in "dws"}
    for letter, ranges in classes.items():
        for low, high in ranges:
            if low <= 0xFFFD <= high or (low <= 0xDFFF and high >= 0xD800):
                raise RuntimeError(f"re's \\{letter} holds U+FFFD or a surrogate: "
                                   "search's surrogate rule no longer holds")
    return classes


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, start = [], 0
    for low, high in ranges:
        if start < low:
            out.append((start, low - 1))
        start = high + 1
    if start < CODE_POINTS:
        out.append((start, CODE_POINTS - 1))
    return out


def _without_surrogate_block(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for low, high in ranges:
        if low < 0xD800:
            out.append((low, min(high, 0xD7FF)))
        if high > 0xDFFF:
            out.append((max(low, 0xE000), high))
    return out


def _digits(text: str) -> bool:
    return 0 < len(text) <= 4 and all("0" <= c <= "9" for c in text)


def _same_kind_range(low: str, high: str) -> bool:
    for first, last in (("a", "z"), ("A", "Z"), ("0", "9")):
        if first <= low <= last and first <= high <= last:
            return low <= high
    return False


def _show(char: str) -> str:
    return f"'{char}'" if char.isascii() and char.isprintable() else f"U+{ord(char):04X}"


def _group_kind(head: str) -> str:
    for lookaround in ("?<=", "?<!", "?=", "?!"):
        if head.startswith(lookaround):
            return f"the lookaround '({lookaround}...)'"
    if head.startswith(("?P", "?<")):
        return "a named group"
    return f"the inline flag or special group '({head[:2]}...)'"


def _atom_kind(char: str) -> str:
    if char in "^$":
        return f"'{char}' that is not the first or last character"
    if char in "*+?{":
        return f"the quantifier '{char}' with nothing to repeat"
    if not char.isascii():
        return f"the non-ASCII character {_show(char)} (not in the accepted subset)"
    return f"the character {_show(char)} unescaped"


def _escape_kind(char: str) -> str:
    if char.isdigit():
        return f"the backreference or octal escape '\\{char}'"
    if char in "bB":
        return (f"the word boundary '\\{char}' (Rust's has no exact form of Python's: "
                "write what it stands for, e.g. (^|\\W)word)")
    if char in "AZz":
        return f"the anchor '\\{char}'"
    return f"the escape '\\{char}'" if char.isascii() and char.isprintable() else (
        f"the escape of {_show(char)}")
