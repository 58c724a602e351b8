"""``hookd.ops.diagnose``: each usual cause named from what the rejected-requests table
keeps, most requests first; nothing wrong, nothing said."""

from __future__ import annotations

from hookd.ops.diagnose import Rejection, Setting, diagnose

GITHUB = Setting("github", "github", secrets=2, tolerance_s=300, max_body_bytes=1_048_576)
STRIPE = Setting("stripe", "stripe", secrets=1, tolerance_s=300, max_body_bytes=1_048_576)
SIGNED_GITHUB = ("content-type", "x-github-event", "x-hub-signature-256")
SIGNED_STRIPE = ("content-type", "stripe-signature")


def causes(
    setting: Setting, rows: list[Rejection], accepted: dict[str, int] | None = None
) -> list[str]:
    return [clue.cause for clue in diagnose(setting, rows, accepted)]


def test_nothing_refused_nothing_said() -> None:
    assert diagnose(GITHUB, []) == []


def test_stripe_headers_at_a_github_source_name_the_wrong_provider() -> None:
    rows = [Rejection("missing_signature", SIGNED_STRIPE)] * 3
    [clue] = diagnose(GITHUB, rows)
    assert clue.cause == "wrong_provider"
    assert "stripe's signature headers" in clue.said and "provider 'github'" in clue.said
    assert clue.count == 3


def test_a_gzip_content_encoding_names_the_proxy() -> None:
    rows = [Rejection("bad_signature", SIGNED_GITHUB, content_encoding="gzip")] * 2
    [clue] = diagnose(GITHUB, rows)
    assert clue.cause == "re_encoded" and "Content-Encoding: gzip" in clue.said


def test_bodies_over_the_limit_say_the_limit_and_the_largest() -> None:
    rows = [Rejection("body_too_large", SIGNED_GITHUB, content_length=2_000_000)]
    [clue] = diagnose(GITHUB, rows)
    assert clue.cause == "too_large"
    assert "1,048,576" in clue.said and "2,000,000" in clue.said


def test_stale_timestamps_say_how_far_behind_the_clock_is() -> None:
    rows = [Rejection("timestamp_too_old", SIGNED_STRIPE, skew_s=-412.0)] * 3 + [
        Rejection("timestamp_too_old", SIGNED_STRIPE, skew_s=-410.0)
    ]
    [clue] = diagnose(STRIPE, rows)
    assert clue.cause == "clock_skew"
    assert "412 s behind this server's clock" in clue.said


def test_a_form_body_names_the_content_type() -> None:
    rows = [
        Rejection(
            "malformed_payload", SIGNED_GITHUB, content_type="application/x-www-form-urlencoded"
        )
    ]
    [clue] = diagnose(GITHUB, rows)
    assert clue.cause == "content_type" and "x-www-form-urlencoded" in clue.said


def test_no_signature_header_says_the_sender_does_not_sign() -> None:
    [clue] = diagnose(GITHUB, [Rejection("missing_signature", ("content-type",))])
    assert clue.cause == "unsigned" and "x-hub-signature-256" in clue.said


def test_a_body_that_verified_earlier_with_the_old_secret_names_a_rotated_secret() -> None:
    rows = [Rejection("bad_signature", SIGNED_GITHUB, body_sha256="aa" * 32)]
    [clue] = diagnose(GITHUB, rows, accepted={"aa" * 32: 1})
    assert clue.cause == "rotated_secret"
    assert "matches none of 2 secrets" in clue.said and "secret #2" in clue.said


def test_a_signature_that_never_verified_names_the_wrong_secret() -> None:
    rows = [Rejection("bad_signature", SIGNED_GITHUB, body_sha256="bb" * 32)]
    assert causes(GITHUB, rows, accepted={"aa" * 32: 0}) == ["wrong_secret"]


def test_mixed_causes_come_most_requests_first_and_the_rest_is_listed() -> None:
    rows = (
        [Rejection("bad_signature", SIGNED_GITHUB)] * 5
        + [Rejection("timestamp_in_future", SIGNED_GITHUB, skew_s=30.0)] * 2
        + [Rejection("duplicate_header", SIGNED_GITHUB)]
    )
    clues = diagnose(GITHUB, rows)
    assert [c.cause for c in clues] == ["wrong_secret", "clock_skew", "other"]
    assert "ahead of" in clues[1].said
    assert "duplicate_header (1)" in clues[2].said
    assert sum(c.count for c in clues) == len(rows)
