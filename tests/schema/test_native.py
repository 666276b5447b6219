"""narad/schema/native.py: the `pattern`s jsonschema-rs runs in Rust's regex engine
give exactly Python's `re.search` verdicts (jsonschema's), on generated patterns and
strings full of the characters where the engines differ."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from narad.schema import compile, native
from narad.schema.native import class_escape, translate
from narad.schema.validate import HAVE_RUST, reference_validator

pytestmark = pytest.mark.skipif(not HAVE_RUST, reason="jsonschema-rs is not installed")

# Where Python's `re`, ECMA-262 and Rust's regex disagree: newlines and other line
# ends, astral characters, metacharacters, and Unicode digits / letters / spaces of
# several scripts, with the characters where Python's `\d \w \s` and Rust's differ:
# Arabic-Indic, Devanagari, fullwidth and astral digits; superscript two and the
# Roman numeral twelve (`\w` in Python, not `\d`); a combining acute and ZWJ (`\w` in
# Rust only); Greek, Cyrillic, CJK, astral Deseret letters; U+001C (`\s` in Python
# only), U+3000, ZWSP, BOM, U+FFFD (what Rust is given for a lone surrogate).
UNICODE = ("\u0661\u0663\u096b\uff11\U0001d7d8\u00b2\u216b\u00e9\u0130\u212a\u03bb\u0436"
           "\u4e2d\U00010400\u0301\u200d\u001c\u001f\u3000\u200b\ufeff\ufffd")
TRICKY = ("aAbzZ09_-.:/ \n\r\t\u2028\u2029\u0085\u000b\u000c\u00a0\U0001f600$^[]{}()|\\?*+,"
          + UNICODE)
TEXTS = st.text(alphabet=TRICKY, max_size=12)
# any code point at all, surrogates included
ANY_TEXTS = st.text(st.characters(exclude_categories=()), max_size=8)

SAFE = [
    ("^ord_[a-z0-9]{8,32}$", "^ord_[a-z0-9]{8,32}\\n?$"),
    ("^[0-9]+(\\.[0-9]{1,2})?$", "^[0-9]+(\\.[0-9]{1,2})?\\n?$"),
    ("^[A-Z]+-[0-9]+$", "^[A-Z]+-[0-9]+\\n?$"),
    ("^.{0,3}$", "^[^\\n]{0,3}\\n?$"),
    ("^$", "^\\n?$"),
    ("$", "\\n?$"),
    ("", ""),
    ("^a", "^a"),
    ("a|b", "a|b"),
    ("(?:a|b)+c", "(?:a|b)+c"),
    ("[a-]", "[a\\-]"),
    ("[-a]", "[\\-a]"),
    ("[^\\]x]", "[^\\]x]"),
    ("a\\$", "a\\$"),
    ("a\\\\$", "a\\\\\\n?$"),
    ("^a|b", "^a|b"),
    ("a|b$", "a|b\\n?$"),
    ("^[^#]*#?$", "^[^#]*#?\\n?$"),
    ("\\n\\.\\/", "\\n\\.\\/"),
    ("^\\d$", f"^[{class_escape('d')}]\\n?$"),
    ("[^\\s]\\S", f"[^{class_escape('s')}][{class_escape('S')}]"),
    ("[\\w_-]", f"[{class_escape('w')}_\\-]"),
    ("[-\\D\\W]", f"[\\-{class_escape('D')}{class_escape('W')}]"),
]
UNSAFE = [
    "\\b", "\\B", "a\\b", "\\bx", "x\\B", "[\\d-z]", "[a-\\w]", "[\\s-\\d]", "[\\b]",
    "\\Aa", "a\\Z", "(?i)a", "(?=a)", "(?<=a)b", "(?!a)",
    "(a)\\1", "(?P<n>a)", "a|^b^", "(^a)", "a$|b$c", "a$b", "a^", "é", "[é]", "[a-Z]",
    "[a-9]", "[]a]",
    "[[a]]", "[a&&b]", "[a~~b]", "[a--b]", "[a-z-0]", "a{,3}", "a{3,1}", "a{2000}", "a{", "}",
    "]", "a**", "a+?", "a*+", "a{2}?", "*a", "(", ")", "a)", "(?:", "[a", "\\", "\\x41",
    "\\u0041", "\\p{L}", "\\cA", "\\0", "\\v",
]


@pytest.mark.parametrize(("pattern", "rust"), SAFE)
def test_translate_subset(pattern: str, rust: str) -> None:
    assert translate(pattern) == rust


@pytest.mark.parametrize("pattern", UNSAFE)
def test_outside_the_subset(pattern: str) -> None:
    assert translate(pattern) is None


def _same_verdicts(pattern: str, texts: list[Any]) -> None:
    """Every path that evaluates a regex keeps `re.search`'s verdict: the fast verdict,
    the explanation, native.search itself, and python-jsonschema's `pattern` and
    `patternProperties` (whose `re` is native.search), on lone surrogates too."""
    schema = {"type": ["string", "integer"], "pattern": pattern}
    validator = compile(schema)
    assert validator.native_patterns is (translate(pattern) is not None)
    reference = reference_validator(schema)
    names = reference_validator({"patternProperties": {pattern: False}})
    regex = re.compile(pattern)
    strings = [text for text in texts if isinstance(text, str)]
    for text in [*texts, *(t + "\ud800" for t in strings), *("\udc00" + t for t in strings),
                 *(t[:1] + "\udbff" + t[1:] for t in strings)]:
        expected = not isinstance(text, str) or regex.search(text) is not None
        assert validator.is_valid(text) is expected, (pattern, text, translate(pattern))
        assert (validator.first_error(text) is None) is expected, (pattern, text)
        assert reference.is_valid(text) is expected, (pattern, text)
        if isinstance(text, str):
            assert native.search(pattern, text) is expected, (pattern, text)
            assert names.is_valid({text: 1}) is not expected, (pattern, text)


@pytest.mark.parametrize(("pattern", "rust"), SAFE)
def test_subset_verdicts_on_tricky_strings(pattern: str, rust: str) -> None:
    texts = ["", "a", "a\n", "a\n\n", "\n", "\r", "a\r", "ord_12345678", "ord_12345678\n",
             "ord_12345678\n\n", "12.5", "12.5\n", "\u0661\u0662", "AB-12", "AB-12\r",
             "ab\u2028", "a\u2029b", "-", "]", "x", "$", "a$", "a\\", "a\\\n", "\n./", 7]
    _same_verdicts(pattern, texts)


# -- Python's class escapes ------------------------------------------------------------

def _members(rust_class: str) -> set[int]:
    """The code points of a class_escape text (`\\x{..}` and `\\x{..}-\\x{..}` items)."""
    out: set[int] = set()
    for low, high in re.findall(r"\\x\{([0-9A-F]+)\}(?:-\\x\{([0-9A-F]+)\})?", rust_class):
        out.update(range(int(low, 16), int(high or low, 16) + 1))
    return out


def test_class_escapes_are_pythons_own_classes() -> None:
    """Each class holds exactly the code points CPython's _sre gives the escape for a
    str pattern (`\\d` Py_UNICODE_ISDECIMAL, `\\w` Py_UNICODE_ISALNUM or `_`, `\\s`
    Py_UNICODE_ISSPACE), told here by str's methods; a negation holds every other code
    point but the surrogates; U+FFFD is in the negations only, like a surrogate."""
    every = [chr(code) for code in range(0x110000)]
    surrogates = set(range(0xD800, 0xE000))
    rules = {"d": str.isdecimal, "w": lambda c: c.isalnum() or c == "_", "s": str.isspace}
    for letter, rule in rules.items():
        members = {ord(c) for c in every if rule(c)}
        assert _members(class_escape(letter)) == members, letter
        assert _members(class_escape(letter.upper())) == (
            set(range(0x110000)) - members - surrogates), letter
        assert 0xFFFD in _members(class_escape(letter.upper()))
        assert not members & surrogates


@pytest.mark.parametrize("pattern", ["\\d", "\\W", "[\\s_]", "[^\\S]"])
def test_rust_gets_no_escape_of_its_own_tables(pattern: str) -> None:
    rust = translate(pattern)
    assert rust is not None
    assert not re.search(r"\\[dwsDWSpP]", rust), rust


CLASS_ESCAPE_PATTERNS = [
    "^\\d{4}-\\d{2}-\\d{2}$", "^\\d+$", "\\D", "^\\w+$", "\\W", "\\s", "^\\S+$",
    "^[\\d_-]+$", "^[^\\s]+$", "[^\\W\\d_]", "^[\\w.-]+@[\\w-]+\\.\\w{2,}$",
    "^\\s*\\w+(\\s+\\w+)*\\s*$", "^[\\D\\s]$", "[^\\D]",
]


@pytest.mark.parametrize("pattern", CLASS_ESCAPE_PATTERNS)
def test_class_escape_verdicts_on_many_scripts(pattern: str) -> None:
    texts = ["2024-01-31", "\u0662\u0660\u0662\u0664-\u0660\u0661-\u0663\u0661",
             "\u0968\u0966\u0968\u096a-\u0966\u0967-\u0969\u0967", "\uff12\uff10\uff12\uff14-01-31",
             "2024-01-3\u00b2", "abcd-01-31", "", "_", "a_b-c", "\u00e9t\u00e9", "e\u0301",
             "\u03bb\u03cc\u03b3\u03bf\u03c2 \u0436\u0443\u043a", "\u4e2d\u6587",
             "\U00010400\U0001d7d8",
             "\u216b", "\u200d", "a\u00a0b", "a\u3000b", "\x1c", "\x1f", "\u200b", "\ufeff",
             "\ufffd", " ", "\t\n", "x\n", "a.b@c-d.ef", "\u00e9@\u00e9.\u00e9\u00e9", "a@b.c",
             "one two  three", " lead", "\u0661", "\U0001f600", 3]
    _same_verdicts(pattern, texts)


# -- patterns generated from the subset's grammar --------------------------------------

LITERAL = st.sampled_from(list("abzAZ09_-:@/,=!<>'\"%; "))
ESCAPE = st.sampled_from([f"\\{c}" for c in ".^$*+?()[]{}|\\/ntrdDwWsS"])
CLASS_CHAR = st.sampled_from([*"abzAZ09_.*+?(){}|$:,", "\\]", "\\[", "\\-", "\\n", "\\\\",
                              *(f"\\{c}" for c in "dDwWsS")])
RANGE = st.sampled_from(["a-z", "A-Z", "0-9", "b-c", "5-5", "a-a"])


@st.composite
def _class(draw: st.DrawFn) -> str:
    items = draw(st.lists(st.one_of(CLASS_CHAR, RANGE), min_size=1, max_size=4))
    dash = draw(st.sampled_from(["", "-first", "-last"]))
    body = "".join(items)
    body = "-" + body if dash == "-first" else body + "-" if dash == "-last" else body
    negated = draw(st.booleans()) and _matches_something("[^" + body + "]")
    return "[" + ("^" if negated else "") + body + "]"


# Characters to probe a negated class with: a class whose complement covers them all
# ([^\d\D], [^\w\D], [^\S\W], ...) matches nothing, which st.from_regex cannot draw from.
PROBES = "".join(map(chr, range(0x250))) + "\u2028\u3000\U0001f600"


def _matches_something(pattern: str) -> bool:
    return re.search(pattern, PROBES) is not None


QUANTIFIER = st.sampled_from(["", "", "?", "*", "+", "{2}", "{0,1}", "{1,}", "{0,3}"])


def _quantified(parts: tuple[str, str]) -> str:
    atom, quantifier = parts
    inner = atom[3:] if atom.startswith("(?:") else atom
    if atom.startswith("(") and any(c in inner for c in "*+?{"):
        return atom  # nested quantifiers make `re` backtrack exponentially: not here
    return atom + quantifier


def _sequence(atom: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(atom, QUANTIFIER).map(_quantified), max_size=4).map("".join)


ATOM = st.recursive(
    st.one_of(LITERAL, ESCAPE, st.just("."), _class()),
    lambda inner: st.tuples(
        st.sampled_from(["(", "(?:"]),
        st.lists(_sequence(inner), min_size=1, max_size=3).map("|".join),
    ).map(lambda parts: parts[0] + parts[1] + ")"),
    max_leaves=6,
)


@st.composite
def subset_patterns(draw: st.DrawFn) -> str:
    body = draw(_sequence(ATOM))
    if draw(st.booleans()):
        return body + "|" + draw(_sequence(ATOM))  # alternatives: no anchors
    return draw(st.sampled_from(["", "^"])) + body + draw(st.sampled_from(["", "$"]))


SETTINGS = settings(max_examples=250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(pattern=subset_patterns(), data=st.data())
@example(pattern="^a$", data=None)
def test_generated_subset_patterns_equal_re(pattern: str, data: st.DataObject | None) -> None:
    assert translate(pattern) is not None, pattern
    texts: list[Any] = ["", "\n", "a\n"]
    if data is not None:
        texts += data.draw(st.lists(TEXTS, max_size=6))
        texts += data.draw(st.lists(ANY_TEXTS, max_size=3))
        # strings `re` matches, and the same with line ends around them
        for _ in range(3):
            hit = data.draw(st.from_regex(pattern))
            if len(hit) > 16:  # keep `re`'s backtracking short
                continue
            texts += [hit, hit + "\n", hit + "\n\n", hit + "\r", "\n" + hit, hit + "\u2028"]
    _same_verdicts(pattern, texts)


# Raw metacharacter soup: whatever `re` compiles and `translate` accepts must agree.
SOUP = st.text(alphabet="ab0-^$.|()[]{},?*+:#\\ndwsDWS\u00e9", max_size=10)


@SETTINGS
@given(pattern=SOUP, texts=st.lists(TEXTS, max_size=8))
def test_any_accepted_pattern_equals_re(pattern: str, texts: list[str]) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set"
            re.compile(pattern)
    except re.error:
        assume(False)
    if translate(pattern) is None:
        return
    _same_verdicts(pattern, [*texts, "a", "a\n", "b\n\n", "0", "\n"])


def test_native_patterns_in_a_realistic_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8,32}$"},
            "amount": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"},
            "tags": {"type": "array", "items": {"pattern": "^[a-z]+$"}},
        },
        "propertyNames": {"pattern": "^[a-z]+$"},
    }
    validator = compile(schema)
    assert validator.native_patterns
    reference = reference_validator(schema)
    docs = [{"id": "ord_12345678"}, {"id": "ord_12345678\n"}, {"id": "ord_12345678\n\n"},
            {"id": "ord_1234567"}, {"amount": "1.25\n"}, {"amount": "1.255"},
            {"tags": ["ab", "a\n", "A"]}, {"tags": ["x\n"]}, {"Id": "x"}, {"id\n": 1}]
    for doc in docs:
        assert validator.is_valid(doc) is reference.is_valid(doc), doc
        assert (validator.first_error(doc) is None) is reference.is_valid(doc), doc


@pytest.mark.parametrize("schema", [
    {"pattern": "^x$", "enum": [{"pattern": "^x$"}, "x"]},  # "pattern" as data
    {"pattern": "^x$", "multipleOf": 2},
])
def test_python_keeps_what_is_not_proven(schema: Any) -> None:
    validator = compile(schema)
    reference = reference_validator(schema)
    for doc in ["x", "x\n", "\u0661", {"a": "\u0661", "b": "x\n"}, {"a": "1", "b": "y"},
                {"pattern": "^x$"}, 4, 3]:
        assert validator.is_valid(doc) is reference.is_valid(doc), (schema, doc)
    if "enum" in schema:
        # the object in `enum` is data: it must keep its text for `enum` to match
        assert not validator.native_patterns
        assert validator.is_valid({"pattern": "^x$"}) is reference.is_valid({"pattern": "^x$"})


def test_error_texts_are_unchanged() -> None:
    validator = compile({"properties": {"id": {"type": "string", "pattern": "^a$"}}})
    assert validator.native_patterns
    assert validator.first_error({"id": "a\n\n"}) == ("$.id", "'a\\n\\n' does not match '^a$'")


@pytest.mark.parametrize("schema", [{"type": "string"}, {"maxLength": 1},
                                    {"pattern": "^a$"}, {"pattern": "^.$"}, {"pattern": "^[^a]+$"},
                                    {"items": {"minLength": 2}}])
def test_lone_surrogates_are_judged_by_jsonschema(schema: Any) -> None:
    validator = compile(schema)
    reference = reference_validator(schema)
    for doc in ["\ud800", "a\udc00", ["\ud800"], ["\ud800\udc00x"]]:
        expected = reference.is_valid(doc)
        assert validator.is_valid(doc) is expected, (schema, doc)
        error = validator.first_error(doc)
        assert (error is None) is expected, (schema, doc)


def test_a_shared_object_is_not_rewritten() -> None:
    node = {"pattern": "^x$"}
    schema = {"properties": {"a": node}, "enum": [{"a": "x"}, {"a": node}]}
    validator = compile(schema)
    assert not validator.native_patterns
    assert validator.is_valid({"a": node}) is reference_validator(schema).is_valid({"a": node})
