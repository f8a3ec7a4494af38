"""What the book measures: time per call, peak memory, parameters, attention entropy, curves.

Shared by the chapters and `benchmarks/`, so that a number in the book and a number in
RESULTS.md come from the same instrument.
"""

from __future__ import annotations

import timeit
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ._validation import check_positive_int, check_tensor

# --------------------------------------------------------------------------- time


def _check_callable(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn: expected a function of no arguments, got {type(fn).__name__}")


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` torch threads, then restore the previous number."""
    check_positive_int("n", n)
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def best_time(fn: Callable[[], object], *, repeats: int = 5, min_time: float = 0.005) -> float:
    """Seconds per call of `fn`: the minimum over `repeats` timed batches (after a warm-up).

    `timeit.Timer.autorange` picks how many calls a batch needs to last at least `min_time`
    seconds (it starts at 1, 2, 5, 10, ...). The minimum over batches is the estimate least
    disturbed by other programs on a shared machine.
    """
    _check_callable(fn)
    check_positive_int("repeats", repeats)
    fn()  # warm-up: first-call allocations and lazy initialisation are not what we measure
    timer = timeit.Timer(fn)
    loops = 1
    while True:  # autorange's loop with our threshold (autorange itself aims at 0.2 s)
        for factor in (1, 2, 5):
            number = loops * factor
            if timer.timeit(number) >= min_time or number >= 1 << 20:
                break
        else:
            loops *= 10
            continue
        break
    return min(timer.repeat(repeat=repeats, number=number)) / number


# --------------------------------------------------------------------------- memory


class MemoryTracker(TorchDispatchMode):
    """Measure the memory PyTorch allocates inside a `with` block: now, at the peak, in total.

    Every operation PyTorch runs passes through `__torch_dispatch__`; we look at each result and,
    when it sits in a new block of memory (a storage), add that block's size and attach a callback
    that subtracts it again when the last tensor using the block is freed. Views (transpose,
    unsqueeze) share their input's storage and cost nothing. Tensors that existed before the
    block (the inputs, the parameters) are not counted. What is measured is the tensors' own
    memory; scratch space a kernel uses internally and frees before returning is not seen.

    Attributes:
        current_bytes: bytes of the block's tensors alive right now.
        peak_bytes: the largest value current_bytes reached.
        allocated_bytes: all bytes ever allocated in the block (freed or not).
    """

    def __init__(self) -> None:
        super().__init__()
        self.current_bytes = 0
        self.peak_bytes = 0
        self.allocated_bytes = 0
        self._live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors using it]

    def _release(self, address: int) -> None:
        entry = self._live.get(address)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current_bytes -= entry[0]
            del self._live[address]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, Tensor)
        }
        for t in tree_leaves(out):
            if not isinstance(t, Tensor):
                continue
            storage = t.untyped_storage()
            address = storage.data_ptr()
            if address in self._live:
                self._live[address][1] += 1  # a view (or in-place result) of a tracked tensor
            elif address in inputs or storage.nbytes() == 0:
                continue  # a view of, or in-place op on, a tensor made before the block
            else:
                self._live[address] = [storage.nbytes(), 1]
                self.current_bytes += storage.nbytes()
                self.allocated_bytes += storage.nbytes()
                self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            weakref.finalize(t, self._release, address)
        return out


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of the tensors `fn()` allocates (its result included), measured, without grad."""
    _check_callable(fn)
    with torch.no_grad(), MemoryTracker() as tracker:
        result = fn()
    del result
    return tracker.peak_bytes


# --------------------------------------------------------------------------- parameters


def count_parameters(module: nn.Module) -> int:
    """Number of parameters of `module` (a tied weight counts once)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters())


# --------------------------------------------------------------------------- attention and curves


def entropy(weights: Tensor) -> Tensor:
    """Entropy in nats over the last axis (0 log 0 = 0): 0 = one key takes all, log S = uniform."""
    check_tensor("weights", weights, min_ndim=1, floating=True)
    return torch.special.entr(weights).sum(dim=-1)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Mean of each run of `window` consecutive values (shorter at the start)."""
    check_positive_int("window", window)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out
