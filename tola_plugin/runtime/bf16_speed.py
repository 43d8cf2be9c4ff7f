"""Whether bf16 (or fp16) is faster than fp32 on this CPU, measured once and cached: which precisions ``auto`` may
give a stage (``plan.fast_dtypes``).

Whether a CPU with bf16 instructions runs TOLA faster in bf16 depends on more than its flags: on a Xeon with
AVX512-BF16 but no AMX bf16 convolutions ran at 0.55x the fp32 speed, on AMD EPYC (Zen 4, Zen 5: AVX512-BF16, no AMX)
at about 2x (docs/inference.md, "Precision"); fp16 likewise (AVX512-FP16 without AMX: 0.55x on that Xeon). So
``speedup`` times the route's dominant convolutions (``bf16_speed_probe.SHAPES``) in fp32 and under bf16 (fp16)
autocast, in a child process (``bf16_speed_probe.py``: a kernel that crashes there ends the child, not the user's
run), and ``auto`` gives a stage that precision only where it measured at least ``AUTO_MIN_SPEEDUP`` times faster.
It is measured only where the CPU has the instructions (``plan.fast_dtypes``): without them the precision is
emulated, many times slower, and never tried. Whether it then computes what fp32 computes is the qualification's
business (``qualification.py``).

The result is cached per machine (``machine.cpu_identity``: CPU model and flags, torch version and kernels) and
precision in the user's cache folder (``utils/user_cache.py``; one JSON file, written atomically): later runs read
it. A cache file that cannot be read or parsed is measured again and rewritten; a child that fails is a measurement
of 0 (fp32).
"""
import json
import os
import time
from typing import Dict, Optional

from tola_plugin.archs.precision import LOW_PRECISIONS
from tola_plugin.runtime.child_process import ChildFailure, python_command, run_child
from tola_plugin.runtime.machine import cpu_identity
from tola_plugin.utils.user_cache import JsonCache

AUTO_MIN_SPEEDUP = 1.3  # below it the gain does not pay for the deviation (docs/inference.md, "Precision")
CACHE_FILE = 'cpu_bf16_speed.json'
FORMAT = 'tola_plugin.bf16_speed/3'  # 3: an entry per precision (bf16, fp16)
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bf16_speed_probe.py')
TIMEOUT = 300.0  # seconds: the measurement takes 2-5 s; an emulated bf16 is abandoned after its first round

CACHE = JsonCache(CACHE_FILE, FORMAT)  # per CPU and precision; in memory as read or measured ('source' said)


def cache_key(precision: str = 'bf16') -> str:
    """The cache's key of this machine (``machine.cpu_identity``) and ``precision``."""
    return f'{cpu_identity()} | {precision}'


def measure_speedup(precision: str = 'bf16', shapes=None, rounds: Optional[int] = None) -> Dict:
    """The measurement of ``bf16_speed_probe.py`` for ``precision`` ('bf16' or 'fp16') in a child process ->
    {'speedup', 'fp32_s', 'low_s', 'threads', 'finite'}; a child that crashes, hangs or fails is {'speedup': 0.0,
    'failed': how} (the precision is not tried)."""
    import torch
    if precision not in LOW_PRECISIONS:
        raise ValueError(f'precision must be one of {LOW_PRECISIONS}, got {precision!r}')
    command = python_command(script=PROBE) + ['--threads', str(torch.get_num_threads()), '--precision', precision]
    if shapes is not None:
        command += ['--shapes', json.dumps([list(s) for s in shapes])]
    if rounds is not None:
        command += ['--rounds', str(rounds)]
    try:
        result = json.loads(
            run_child(command, f'the {precision} speed measurement', TIMEOUT).stdout.strip().splitlines()[-1])
    except (ChildFailure, ValueError, IndexError) as err:
        return {'speedup': 0.0, 'failed': str(err)}
    if not result.get('finite', True):
        result = dict(result, speedup=0.0, failed=f'{precision} convolutions returned non-finite values')
    return result


def _valid(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get('speedup'), (int, float)) and entry['speedup'] >= 0


def speedup(precision: str = 'bf16', measure=None) -> Dict:
    """This CPU's cache entry of ``precision`` ({'speedup', 'fp32_s', 'low_s', 'threads', 'measured', 'source'}):
    from this process's memory, else the cache file, else measured now (``measure()``, by default
    ``measure_speedup(precision)``) and written to the cache file atomically; a cache file that is corrupt, or holds
    a broken entry for this CPU, is measured again and rewritten. 'source' says which: 'cache' or 'measured'."""
    key = cache_key(precision)
    if key in CACHE.memory:
        return CACHE.memory[key]
    entry = CACHE.entries().get(key)
    if _valid(entry):
        entry = dict(entry, source='cache')
    else:
        result = measure() if measure is not None else measure_speedup(precision)
        entry = dict(result, measured=time.strftime('%Y-%m-%d %H:%M:%S'))
        CACHE.put(key, entry)  # a read-only cache folder: this process remembers, the next measures again
        entry = dict(entry, source='measured')
    CACHE.memory[key] = entry
    return entry


def is_faster(precision: str = 'bf16') -> bool:
    """Whether ``precision`` measured at least ``AUTO_MIN_SPEEDUP`` times faster than fp32 on this CPU."""
    return speedup(precision)['speedup'] >= AUTO_MIN_SPEEDUP


def forget() -> None:
    """Drop this process's memory of the decision (tests; the cache file is left as it is)."""
    CACHE.memory.clear()
