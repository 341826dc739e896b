"""Static-shape sizes and shared-prefix grouping (jaxdebate.shapes)."""

from jaxdebate.shapes import group_prefixes, round_size, sizes_upto


def test_sizes_are_powers_of_two_and_one_and_a_half_times_them():
    assert sizes_upto(32) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert sizes_upto(32, multiple=2) == [2, 4, 6, 8, 12, 16, 24, 32]
    assert sizes_upto(4, multiple=8) == [8]
    assert [round_size(n) for n in (1, 3, 5, 7, 13, 24, 25, 100)] == [1, 3, 6, 8, 16, 24, 32, 128]
    assert round_size(5, minimum=16) == 16 and round_size(5, multiple=4) == 8


def test_group_prefixes_shares_when_it_saves_tokens():
    q1, q2 = [1] * 10 + [2] * 30, [1] * 10 + [3] * 30  # a 10-token template, then two questions
    keys = [q1 + [7, 8], q1 + [9], q1 + [5, 5, 5], q2 + [4], q2 + [6], [9, 9, 9]]
    shareable = [len(k) for k in keys]
    groups = group_prefixes(keys, shareable, [len(k) + 5 for k in keys])
    # each question's turns share the whole question; the template alone is not worth merging them
    assert sorted((p, sorted(m)) for p, m in groups) == [(0, [5]), (40, [0, 1, 2]), (40, [3, 4])]
    # a size cap splits a group; a minimum prefix turns short sharing off
    capped = group_prefixes(keys[:3], shareable[:3], [len(k) + 5 for k in keys[:3]], max_size=55)
    assert sorted(len(m) for _, m in capped) == [1, 2]
    assert all(p == 0 for p, _ in group_prefixes(keys[:3], shareable[:3], [50] * 3, min_prefix=64))


def test_prompt_buckets_are_fine_where_prefill_costs_and_coarse_beyond():
    from jaxdebate.shapes import prompt_bucket, round_up

    assert [prompt_bucket(n, 16) for n in (1, 16, 17, 69, 76, 80, 81, 256)] == [16, 16, 32, 80, 80, 80, 96, 256]
    assert [prompt_bucket(n, 16) for n in (257, 384, 385, 513, 1100)] == [384, 384, 512, 1024, 1536]
    assert prompt_bucket(3, 32) == 32  # the minimum
    assert all(prompt_bucket(n, 16) >= n for n in range(1, 2000))
    assert len({prompt_bucket(n, 16) for n in range(1, 257)}) == 16  # one compiled width per 16 tokens
    assert round_up(209, 64) == 256 and round_up(256, 64) == 256
