"""Soak and leaks: 10,000 mixed collectives, 200 groups created and destroyed, two groups from two threads."""
import soak_workers as w
from pg import run_in_group


def test_ten_thousand_mixed_collectives_stay_correct_and_bounded():
    for r in run_in_group(w.mixed_collectives, 2, 10_000, test_timeout=300):
        print(f"2 x 10k collectives: rss growth {r['rss_growth_kib']} KiB (rss {r['rss_kib']} KiB), "
              f"fd growth {r['fd_growth']}")
        assert r["bad"] == 0
        assert r["fd_growth"] == [0, 0]
        assert r["rss_growth_kib"][0] < 8 * 1024  # a one-time fill of allocator pools and caches
        assert r["rss_growth_kib"][1] < 1024  # steady state: no per-op leak


def test_two_hundred_groups_created_and_destroyed():
    for r in run_in_group(w.many_groups, 2, 200, test_timeout=600):
        print(f"200 groups: rss growth {r['rss_growth_kib']} KiB, fd growth {r['fd_growth']}")
        assert r["bad"] == 0
        assert r["fd_growth"] <= 4  # no descriptor kept per group
        assert r["rss_growth_kib"] < 32 * 1024


def test_two_groups_driven_from_two_threads_at_once():
    assert run_in_group(w.two_groups_two_threads, 2, 300) == [[], []]
