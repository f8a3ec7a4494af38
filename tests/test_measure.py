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


def test_best_time_measures_a_known_duration():
    seconds = best_time(lambda: time.sleep(0.002), repeats=3)
    assert 0.0018 < seconds < 0.05  # at least the sleep; a busy machine may add some


def test_best_time_warms_up_and_repeats():
    calls = []
    best_time(lambda: calls.append(1), repeats=4, min_time=0.0)
    assert len(calls) >= 1 + 4  # one warm-up call, then at least one call per batch


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


def test_memory_tracker_reports_current_peak_and_total():
    x = torch.ones(100)  # made before the block: not counted
    with MemoryTracker() as tracker:
        y = x * 2  # 400
        z = y + 1  # 400
        del y
    assert tracker.peak_bytes == 800
    assert tracker.allocated_bytes == 800
    assert tracker.current_bytes == 400  # z is still alive
    del z


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
