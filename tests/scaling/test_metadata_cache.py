"""MetadataCache: hits, errors raised again, LRU bound, profile sets in the key, threads."""

from __future__ import annotations

import threading

import pytest

from gpuscale.scaling import MetadataCache, MetadataError, Profile, ProfileSet


def test_hit_returns_the_same_object() -> None:
    cache = MetadataCache()
    first = cache.parse({"targetValue": "70"})
    assert cache.parse({"targetValue": "70"}) is first
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)


def test_errors_are_cached_and_raised_again() -> None:
    cache = MetadataCache()
    for _ in range(3):
        with pytest.raises(MetadataError) as info:
            cache.parse({"targetValue": "0"})
        assert info.value.problems == ('parameter "targetValue" value "0" must be greater than 0',)
    assert (cache.hits, cache.misses) == (2, 1)


def test_bounded_lru() -> None:
    cache = MetadataCache(maxsize=3)
    for value in range(1, 10):
        cache.parse({"targetValue": str(value)})
    assert len(cache) == 3
    cache.parse({"targetValue": "7"})  # the oldest kept: now the newest
    cache.parse({"targetValue": "10"})
    cache.parse({"targetValue": "7"})
    assert cache.hits == 2
    with pytest.raises(ValueError):
        MetadataCache(maxsize=0)


def test_large_metadata_is_not_kept() -> None:
    cache = MetadataCache(max_chars=100)
    with pytest.raises(MetadataError):
        cache.parse({"targetValue": "70", "junk": "x" * 200})
    assert len(cache) == 0


def test_profile_set_is_part_of_the_key() -> None:
    cache = MetadataCache()
    custom = ProfileSet.builtin().with_profiles([Profile("llm-serving", target_value=50.0, window=1.0)])
    assert cache.parse({"profile": "llm-serving"}).target_value == 5.0
    assert cache.parse({"profile": "llm-serving"}, custom).target_value == 50.0
    assert MetadataCache(custom).parse({"profile": "llm-serving"}).target_value == 50.0


def test_threads() -> None:
    cache = MetadataCache(maxsize=16)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(200):
                value = (i + offset) % 40 + 1
                assert cache.parse({"targetValue": str(value)}).target_value == value
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache) == 16
    assert cache.hits + cache.misses == 800
