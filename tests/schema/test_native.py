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
from narad.schema.native import translate
from narad.schema.validate import HAVE_RUST, reference_validator

pytestmark = pytest.mark.skipif(not HAVE_RUST, reason="jsonschema-rs is not installed")

# Where Python's `re`, ECMA-262 and Rust's regex disagree: newlines and other line
# ends, Unicode digits / letters / spaces, astral characters, metacharacters.
TRICKY = ("aAbzZ09_-.:/ \n\r\t\u2028\u2029\u0085\u000b\u000c\u00a0\u0661\u00e9\u0130\u212a"
          "\U0001f600$^[]{}()|\\?*+,")
TEXTS = st.text(alphabet=TRICKY, max_size=12)

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
]
UNSAFE = [
    "^\\d+$", "\\w", "\\s", "\\bx", "\\Aa", "a\\Z", "(?i)a", "(?=a)", "(?<=a)b", "(?!a)",
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
    for text in [*texts, *(t + "\ud800" for t in strings), *("\udc00" + t for t in strings)]:
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


# -- patterns generated from the subset's grammar --------------------------------------

LITERAL = st.sampled_from(list("abzAZ09_-:@/,=!<>'\"%; "))
ESCAPE = st.sampled_from([f"\\{c}" for c in ".^$*+?()[]{}|\\/ntr"])
CLASS_CHAR = st.sampled_from([*"abzAZ09_.*+?(){}|$:,", "\\]", "\\[", "\\-", "\\n", "\\\\"])
RANGE = st.sampled_from(["a-z", "A-Z", "0-9", "b-c", "5-5", "a-a"])


@st.composite
def _class(draw: st.DrawFn) -> str:
    items = draw(st.lists(st.one_of(CLASS_CHAR, RANGE), min_size=1, max_size=4))
    dash = draw(st.sampled_from(["", "-first", "-last"]))
    body = "".join(items)
    body = "-" + body if dash == "-first" else body + "-" if dash == "-last" else body
    return "[" + draw(st.sampled_from(["", "^"])) + body + "]"


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
        # strings `re` matches, and the same with line ends around them
        for _ in range(3):
            hit = data.draw(st.from_regex(pattern))
            if len(hit) > 16:  # keep `re`'s backtracking short
                continue
            texts += [hit, hit + "\n", hit + "\n\n", hit + "\r", "\n" + hit, hit + "\u2028"]
    _same_verdicts(pattern, texts)


# Raw metacharacter soup: whatever `re` compiles and `translate` accepts must agree.
SOUP = st.text(alphabet="ab0-^$.|()[]{},?*+:#\\nd\u00e9", max_size=10)


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
