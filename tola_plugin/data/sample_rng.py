"""Per-sample random state derived from (seed, epoch, index), independent of DataLoader workers.

A sample's degradation depends only on its own seed, never on which worker ran it or what that
worker drew before. ``sample_generator`` gives a numpy Generator for code written here;
``seeded_global_rngs`` seeds Python's ``random``, numpy's legacy global RNG and torch's CPU RNG
for basicsr's samplers (``random_mixed_kernels``, ``random_add_*_noise_pt``), which draw from those
globals and accept no generator, and restores the previous states afterwards so the training loop's
own randomness (e.g. diffusion noise when ``num_workers: 0``) is left untouched.
"""
import random
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch


def sample_seed_sequence(seed: int, epoch: int, index: int, attempt: int = 0) -> np.random.SeedSequence:
    """The SeedSequence of one sample (``attempt`` > 0: an independent stream for a retry)."""
    values = [('seed', seed), ('epoch', epoch), ('index', index), ('attempt', attempt)]
    for name, value in values:
        if int(value) != value or value < 0:
            raise ValueError(f'{name} must be a non-negative integer, got {value!r}')
    entropy = [int(v) for _, v in values[:3]] + ([int(attempt)] if attempt else [])
    return np.random.SeedSequence(entropy)


def sample_generator(seed: int, epoch: int, index: int, attempt: int = 0) -> np.random.Generator:
    """numpy Generator (PCG64) owned by one sample."""
    return np.random.Generator(np.random.PCG64(sample_seed_sequence(seed, epoch, index, attempt)))


def sample_side_generator(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    """Another numpy Generator of the same sample (``stream`` >= 1), independent of ``sample_generator``'s: draws
    made from it (e.g. a crop position) leave the sample's degradation unchanged."""
    entropy = sample_seed_sequence(seed, epoch, index).entropy
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy, spawn_key=(int(stream), ))))


@contextmanager
def seeded_global_rngs(rng: np.random.Generator) -> Iterator[None]:
    """Seed ``random``, ``np.random`` and torch's CPU RNG from ``rng``; restore their states on exit.

    Also pins torch to one intra-op thread inside the scope so float reductions (and therefore the
    8-bit-rounded output) do not depend on the thread count of the calling process.
    """
    seed32, seed64 = int(rng.integers(2**32)), int(rng.integers(2**63))
    py_state, np_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    threads = torch.get_num_threads()
    random.seed(seed64)
    np.random.seed(seed32)
    torch.default_generator.manual_seed(seed64)  # CPU only: CUDA generators stay untouched
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        if threads != 1:
            torch.set_num_threads(threads)
