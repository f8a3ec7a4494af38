"""Tests for measure.py: timer, thread count, memory tracker, entropy, moving average."""

from __future__ import annotations

import math
import time

import pytest
import torch

from transformer_course.measure import (
    MemoryTracker,
    best_time,
    entropy,
    moving_average,
    peak_memory,
    torch_threads,
)


def test_torch_threads_sets_and_restores_even_after_an_error():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), torch_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_best_time_measures_a_known_duration_after_a_warm_up():
    calls = []
    seconds = best_time(lambda: (calls.append(1), time.sleep(0.002)), repeats=3)
    assert 0.0018 < seconds < 0.05  # at least the sleep; a busy machine may add some
    assert len(calls) >= 1 + 3  # one warm-up call, then at least one call per batch


def test_peak_memory_sees_an_allocation_of_known_size():
    assert peak_memory(lambda: torch.empty(1000, dtype=torch.float32)) == 4000
    assert peak_memory(lambda: torch.empty(10, 10, dtype=torch.float64)) == 800


def test_peak_memory_counts_a_freed_temporary_once_and_views_not_at_all():
    def two_in_turn():
        a = torch.ones(1000)  # 4000 bytes, freed before b
        del a
        b = torch.ones(1000)
        return b.t().view(10, 100)  # views share b's storage

    assert peak_memory(two_in_turn) == 4000

    def two_at_once():
        a, b = torch.ones(1000), torch.ones(1000)
        return a + b

    assert peak_memory(two_at_once) == 3 * 4000


def test_memory_tracker_counts_allocations_frees_and_ignores_views():
    x = torch.randn(1000)  # made before the block: not counted
    with MemoryTracker() as tracker:
        view = x.view(10, 100).t()  # a view: no new memory
        y = x + 1  # 4000 bytes
        z = y * 2  # 4000 bytes more, y still alive: peak 8000
        del y  # freed: 4000 left
        w = z.sum()  # 4 bytes
    assert tracker.peak_bytes == 8000
    assert tracker.current_bytes == 4004
    assert tracker.allocated_bytes == 8004
    del z, w
    assert tracker.current_bytes == 0
    assert view.shape == (100, 10)


def test_memory_tracker_follows_a_storage_until_its_last_view_dies():
    with MemoryTracker() as tracker:
        y = torch.ones(250)  # 1000 bytes
        v = y[:10]  # a view of a tracked tensor
    del y
    assert tracker.current_bytes == 1000  # the view keeps the storage alive
    del v
    assert tracker.current_bytes == 0


def test_entropy_of_uniform_and_one_hot_weights():
    S = 8
    uniform = torch.full((3, S), 1 / S)
    one_hot = torch.eye(S)
    torch.testing.assert_close(entropy(uniform), torch.full((3,), math.log(S)))
    torch.testing.assert_close(entropy(one_hot), torch.zeros(S))


def test_moving_average():
    assert moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert moving_average([1.0, 5.0], 1) == [1.0, 5.0]
    assert moving_average([], 3) == []
