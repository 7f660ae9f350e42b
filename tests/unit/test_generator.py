import json
from datetime import datetime, timedelta

from domains.clickstream.generator import generate
from domains.sample import Mix, counts
from views.timebase import UTC

START = datetime(2026, 11, 20, tzinfo=UTC)


def test_same_seed_same_records_and_kinds_add_up():
    records = generate(START, START + timedelta(days=1), 2000, seed=5)
    assert records == generate(START, START + timedelta(days=1), 2000, seed=5)
    tally = counts(records)
    assert tally["total"] == len(records) == sum(tally[k] for k in ("valid", "late", "duplicate", "malformed"))
    assert all(tally[k] > 0 for k in ("late", "duplicate", "malformed"))


def test_records_are_in_send_order_and_late_events_trail_by_the_mix():
    mix = Mix(late=0.2)
    records = generate(START, START + timedelta(hours=6), 1000, seed=2, mix=mix)
    assert [r.send_at for r in records] == sorted(r.send_at for r in records)
    for record in (r for r in records if r.kind == "late"):
        event_time = datetime.fromisoformat(json.loads(record.value)["event_time"])
        assert timedelta(minutes=mix.late_by[0]) <= record.send_at - event_time <= timedelta(minutes=mix.late_by[1])


def test_duplicates_resend_an_earlier_event():
    records = generate(START, START + timedelta(hours=6), 1000, seed=3, mix=Mix(duplicate=0.2))
    first_sent = {}
    for record in records:
        if record.kind in ("valid", "late"):
            first_sent.setdefault(json.loads(record.value)["event_id"], record.send_at)
    for record in (r for r in records if r.kind == "duplicate"):
        assert first_sent[json.loads(record.value)["event_id"]] < record.send_at


def test_unshaped_records_are_sent_at_a_steady_rate():
    """Sessions begun before the start send their later events too: the rate does not climb as
    sessions pile up (five minutes of bursts begun at the start: 0.6x the mean in the first half
    minute, 1.5x in the last)."""
    records = generate(START, START + timedelta(minutes=5), 30_000, seed=4, shaped=False)
    assert records[0].send_at >= START
    per_half_minute = [0] * 10
    for record in records:  # a resent copy goes a second after its original, maybe after the end
        per_half_minute[min(9, int((record.send_at - START).total_seconds() // 30))] += 1
    mean = len(records) / 10
    assert all(0.9 * mean <= sent <= 1.1 * mean for sent in per_half_minute), per_half_minute
