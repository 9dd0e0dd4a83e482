"""Entity tags and conditional-request matching (RFC 9110 §8.8.3, §13.1.1-2)."""

from __future__ import annotations

import pytest

from orchestrator.domain.preconditions import (
    EntityTag,
    lease_etag,
    not_modified,
    parse_tag_list,
    representation_etag,
)
from orchestrator.domain.states import PaymentStatus
from tests.unit.records import a_record

CURRENT = '"abc"'


@pytest.mark.parametrize(
    ("header", "tags"),
    [
        ('"abc"', [EntityTag("abc")]),
        ('W/"abc"', [EntityTag("abc", weak=True)]),
        ('"a", W/"b" ,"c"', [EntityTag("a"), EntityTag("b", weak=True), EntityTag("c")]),
        ('""', [EntityTag("")]),
        ('"7.processing"', [EntityTag("7.processing")]),
    ],
)
def test_entity_tag_lists_are_parsed(header, tags):
    parsed = parse_tag_list(header)
    assert parsed is not None
    assert not parsed.any
    assert list(parsed.tags) == tags


def test_a_star_matches_any_current_representation():
    parsed = parse_tag_list(" * ")
    assert parsed is not None and parsed.any
    assert parsed.matches_strongly(CURRENT) and parsed.matches_weakly(CURRENT)


@pytest.mark.parametrize(
    "header",
    [
        "abc",
        '"abc',
        'abc"',
        '"a" "b"',
        '"a",,',
        'w/"abc"',
        '"a"b"',
        ",".join(['"x"'] * 33),
    ],
)
def test_a_malformed_header_is_none(header):
    assert parse_tag_list(header) is None


@pytest.mark.parametrize("header", ["", " "])
def test_an_empty_header_is_the_empty_list_and_matches_nothing(header):
    parsed = parse_tag_list(header)
    assert parsed is not None and parsed.tags == () and not parsed.any
    assert not parsed.matches_weakly(CURRENT) and not parsed.matches_strongly(CURRENT)


def test_if_match_compares_strongly_and_if_none_match_weakly():
    weak = parse_tag_list('W/"abc"')
    strong = parse_tag_list('"abc"')
    other = parse_tag_list('"abd", "x"')
    assert weak is not None and strong is not None and other is not None
    assert not weak.matches_strongly(CURRENT)
    assert weak.matches_weakly(CURRENT)
    assert strong.matches_strongly(CURRENT) and strong.matches_weakly(CURRENT)
    assert not other.matches_strongly(CURRENT) and not other.matches_weakly(CURRENT)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, False),
        (CURRENT, True),
        ('W/"abc"', True),
        ('"zzz", "abc"', True),
        ("*", True),
        ('"abd"', False),
        ("abc", False),  # malformed: answer in full, never a wrong 304
    ],
)
def test_not_modified(header, expected):
    assert not_modified(header, CURRENT) is expected


def test_a_representation_tag_is_strong_and_follows_every_byte():
    tag = representation_etag(b'{"a":1}')
    assert tag.startswith('"') and tag.endswith('"') and not tag.startswith("W/")
    assert tag == representation_etag(b'{"a":1}')
    assert tag != representation_etag(b'{"a":2}')
    assert tag != representation_etag(b'{"a": 1}')


def test_a_lease_tag_follows_the_token_and_the_status():
    record = a_record()
    assert lease_etag(record) == f'"{record.lease_token}.processing"'
    assert lease_etag(a_record(lease_token=2)) != lease_etag(record)
    assert lease_etag(a_record(status=PaymentStatus.NEEDS_ATTENTION)) != lease_etag(record)
    # A heartbeat (a later locked_until) or another attempt leaves the tag alone.
    assert lease_etag(a_record(attempts=3, locked_until=None)) == lease_etag(record)
