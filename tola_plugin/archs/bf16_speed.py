"""Whether bf16 is faster than fp32 on this CPU, measured once and cached: the decision of ``precision: auto``.

Whether a CPU with bf16 instructions runs TOLA faster in bf16 depends on more than its flags: on a Xeon with
AVX512-BF16 but no AMX bf16 convolutions ran at 0.55x the fp32 speed, on AMD EPYC (Zen 4, Zen 5: AVX512-BF16, no AMX)
at about 2x (docs/inference.md, "Precision"). So ``bf16_speedup`` times the route's dominant convolutions (``SHAPES``:
the VAE decoder's three levels and the IDM's, about 1.5 s in all) in fp32 and under bf16 autocast, as the forward
runs them, and ``auto`` picks bf16 where bf16 measured at least ``AUTO_BF16_MIN_SPEEDUP`` times faster.

The result is cached per CPU model (name, family, model, stepping) and torch version in the user's cache folder
(``utils/user_cache.py``; one JSON file, written atomically): later runs read it. A cache file that cannot be read or
parsed is measured again and rewritten.
"""
import os
import platform
import statistics
import time
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.user_cache import cache_path

AUTO_BF16_MIN_SPEEDUP = 1.3  # below it the gain does not pay for bf16's deviation (0.02 dB on the demo model)
CACHE_FILE = 'cpu_bf16_speed.json'
FORMAT = 'tola_plugin.bf16_speed/1'
#: (channels, height, width) of 3x3 convolutions that dominate a 128x512 restore (batch 1): the VAE decoder's levels
#: at 32x128, 64x256 and 128x512, and the IDM's at 16x64 and 4x16 (the last one weight-bound); 34 GMAC in all
SHAPES = ((512, 32, 128), (256, 64, 256), (128, 128, 512), (640, 16, 64), (1280, 4, 16))
ROUNDS = 3  # timed rounds (median) after a warm-up round
ABANDON = 4.0  # bf16 taking this many times the fp32 time in the warm-up: emulated, not measured further

_measured: Dict[str, Dict] = {}  # per process: the cache entry of this CPU, once read or measured


def cpu_model() -> str:
    """This CPU's model: /proc/cpuinfo's name with its family, model and stepping (one name can cover several
    generations: 'AMD EPYC' is the name of Zen 4 and Zen 5 virtual CPUs alike), else the platform's name."""
    fields = {}
    try:
        with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(':')
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get('model name') or platform.processor() or platform.machine() or 'unknown CPU'
    ids = [f'{k} {fields[k]}' for k in ('cpu family', 'model', 'stepping') if k in fields]
    return f'{name} ({", ".join(ids)})' if ids else name


def cache_key() -> str:
    """The cache's key of this machine: the CPU model, the torch version and the kernels it runs (its CPU capability
    and oneDNN's forced instruction set, if any: forcing them below bf16 makes bf16 emulated)."""
    forced = os.environ.get('ONEDNN_MAX_CPU_ISA', '')
    return (f'{cpu_model()} | torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()}'
            f'{" oneDNN " + forced if forced else ""}')


def measure_bf16_speedup(shapes=SHAPES, rounds: int = ROUNDS) -> Dict:
    """Time one 3x3 convolution per shape of ``shapes`` (batch 1, fp32 weights) in fp32 and under bf16 autocast,
    interleaved, median of ``rounds`` after a warm-up. -> {'speedup': fp32 seconds / bf16 seconds (sum over the
    shapes), 'fp32_s', 'bf16_s', 'threads'}. Where bf16 turns out far slower (its kernels emulated, e.g. with
    oneDNN forced below the CPU's bf16 instructions) the warm-up stops once bf16 has taken ``ABANDON`` times the
    fp32 time, and the speedup is the bound measured so far (the decision is fp32 either way)."""
    gen = torch.Generator().manual_seed(0)
    # cheapest first: an emulated bf16 is caught on a convolution of seconds, not minutes
    cases = [(torch.randn(1, c, h, w, generator=gen), torch.randn(c, c, 3, 3, generator=gen) * 0.02)
             for c, h, w in sorted(shapes, key=lambda s: s[0]**2 * s[1] * s[2])]
    seconds = {'fp32': [], 'bf16': []}
    warm_fp32 = None
    with torch.inference_mode():
        for round_index in range(rounds + 1):
            for name in ('fp32', 'bf16'):
                with torch.autocast('cpu', dtype=torch.bfloat16, enabled=name == 'bf16'):
                    start = time.perf_counter()
                    for x, weight in cases:
                        F.conv2d(x, weight, padding=1)
                        if name == 'bf16' and round_index == 0 and \
                                time.perf_counter() - start > ABANDON * warm_fp32:
                            elapsed = time.perf_counter() - start
                            return {
                                'speedup': warm_fp32 / elapsed, 'fp32_s': warm_fp32, 'bf16_s': elapsed,
                                'threads': torch.get_num_threads(), 'abandoned': True
                            }
                    elapsed = time.perf_counter() - start
                if round_index:
                    seconds[name].append(elapsed)
                elif name == 'fp32':
                    warm_fp32 = elapsed
    fp32, bf16 = statistics.median(seconds['fp32']), statistics.median(seconds['bf16'])
    return {'speedup': fp32 / bf16, 'fp32_s': fp32, 'bf16_s': bf16, 'threads': torch.get_num_threads()}


def _read_cache(path: str) -> Optional[Dict]:
    """The cache's entries, or None when the file is missing, unreadable or not ours (then it is measured again)."""
    data = read_json_dict(path)
    if data is None or data.get('format') != FORMAT or not isinstance(data.get('entries'), dict):
        return None
    return data['entries']


def _valid(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get('speedup'), (int, float)) and entry['speedup'] > 0


def bf16_speedup(measure=measure_bf16_speedup) -> Dict:
    """This CPU's cache entry ({'speedup', 'fp32_s', 'bf16_s', 'threads', 'measured', 'source'}): from this process's
    memory, else the cache file, else measured now (``measure()``) and written to the cache file atomically; a
    cache file that is corrupt, or holds a broken entry for this CPU, is measured again and rewritten. 'source' says
    which: 'cache' or 'measured'."""
    key = cache_key()
    if key in _measured:
        return _measured[key]
    path = cache_file()
    entries = _read_cache(path)
    entry = (entries or {}).get(key)
    if _valid(entry):
        entry = dict(entry, source='cache')
    else:
        entry = dict(measure(), measured=time.strftime('%Y-%m-%d %H:%M:%S'))
        entries = dict(entries or {}, **{key: entry})
        try:
            write_json(path, {'format': FORMAT, 'entries': entries})
        except OSError:
            pass  # a read-only cache folder: the decision holds for this process and is measured again next time
        entry = dict(entry, source='measured')
    _measured[key] = entry
    return entry


def forget() -> None:
    """Drop this process's memory of the decision (tests; the cache file is left as it is)."""
    _measured.clear()


def cache_file() -> str:
    """Where the decision is cached (its folder created)."""
    return cache_path(CACHE_FILE)
