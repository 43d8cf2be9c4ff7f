"""The OpenVINO worker: a child process that compiles TOLA's stages (OpenVINO IR), each in the precision its parent
asks, and runs them on the arrays its parent sends. Started by ``openvino_client.py``; OpenVINO is only ever loaded
here, so a crash of its kernels ends this process and the parent falls back to another path (docs/inference.md,
"Qualification").

    python openvino_worker.py READ_FD WRITE_FD

Messages (pickled dicts over ``multiprocessing.connection``): {'op': 'load', 'stages': {name: xml}, 'hints': {name:
'f32' | 'bf16' | 'f16'}, 'threads': n, 'cache_dir': path or None} -> {'ok': True, 'version', 'seconds', 'precisions':
{name: the precision its kernels compute in, ``compiled_precision``}}; {'op': 'run', 'stage': name, 'inputs': [arrays],
'keep': None} -> {'ok': True, 'output': float32 array}; with 'keep': a name, the output stays here under that name
(-> {'ok': True, 'shape': its shape}) and a later run's input may be that name (the text prior's encoder output, read
by each decoding step); {'op': 'exit'}. A failure is {'ok': False, 'error': message}. End of input (the parent gone)
ends the worker. Imports numpy, OpenVINO and the standard library only, so it starts in well under a second. A thread
keeps the weights files OpenVINO maps out of its resident memory (``PageTrimmer``).

Each stage runs on one request with every thread on it (``compile_config``: one stream, LATENCY).
"""
import ctypes
import os
import sys
import threading
import time
from multiprocessing.connection import Connection

MADV_DONTNEED = 4
WEIGHT_FILES = ('.bin', '.blob')  # the IR's weights, OpenVINO's compiled cache entries


class PageTrimmer:
    """Keeps the original weights OpenVINO maps from its files out of this worker's resident memory, so that it holds
    one copy of each weight: the one its kernels run on.

    OpenVINO maps a weights file read-only (the IR's .bin, or the compiled model's cache blob) and keeps the mapping
    for the compiled model's life, while its convolutions and matmuls run on copies repacked for this CPU: after the
    first inference the mapped pages are rarely read again, yet they stay resident, a second copy of every weight.
    Every ``period`` seconds, when this process's resident file pages grew by ``growth`` bytes, a thread drops its
    pages of those read-only mappings (madvise MADV_DONTNEED: a page read again is mapped again, unchanged, from the
    file). Written by hand: OpenVINO has no setting for it."""

    def __init__(self, period: float = 0.02, growth: int = 32 << 20):
        self.period, self.growth = period, growth
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.trimmed = 0

    def start(self) -> 'PageTrimmer':
        self.trimmed = self.rss_file()
        threading.Thread(target=self.run, name='page-trimmer', daemon=True).start()
        return self

    @staticmethod
    def rss_file() -> int:
        """Resident file-backed bytes of this process (/proc/self/status RssFile)."""
        with open('/proc/self/status', encoding='ascii') as f:
            for line in f:
                if line.startswith('RssFile:'):
                    return int(line.split()[1]) * 1024
        return 0

    def trim(self) -> int:
        """Drop this process's pages of the read-only mappings of weight files; returns the bytes of mappings."""
        dropped = 0
        with open('/proc/self/maps', encoding='utf-8') as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and 'w' not in fields[1] and fields[5].rstrip('\n').endswith(WEIGHT_FILES):
                    start, end = (int(x, 16) for x in fields[0].split('-'))
                    if self.libc.madvise(start, end - start, MADV_DONTNEED) == 0:
                        dropped += end - start
        return dropped

    def run(self) -> None:
        while True:
            time.sleep(self.period)
            if self.rss_file() > self.trimmed + self.growth:
                self.trim()
                self.trimmed = self.rss_file()


#: the layers that do a stage's arithmetic (OpenVINO's runtime model names them so): their precision is the stage's
COMPUTE_LAYERS = ('Convolution', 'GroupConvolution', 'Deconvolution', 'MatMul', 'FullyConnected')


def compiled_precision(compiled) -> str:
    """The precision a compiled model computes in ('f32', 'bf16', 'f16'): that of most of its convolutions and matrix
    products in OpenVINO's runtime model (what its kernels run; a hint the CPU cannot honour is replaced there: f16 is
    compiled as bf16 on a CPU with bf16 but no fp16 instructions, bf16 as f32 on one without bf16 instructions);
    the resolved hint where the model has no such layer."""
    counts = {}
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if 'layerType' in info and 'runtimePrecision' in info and info['layerType'].astype(str) in COMPUTE_LAYERS:
            precision = info['runtimePrecision'].astype(str)
            counts[precision] = counts.get(precision, 0) + 1
    if counts:
        return max(sorted(counts), key=counts.get)
    return compiled.get_property('INFERENCE_PRECISION_HINT').get_type_name()


def compile_config(message, stage: str) -> dict:
    """OpenVINO's CPU settings of ``stage`` for the load message's precision hints and threads: one stream, every
    thread on each request (module docstring)."""
    return {
        'INFERENCE_PRECISION_HINT': message['hints'][stage], 'INFERENCE_NUM_THREADS': int(message['threads']),
        'NUM_STREAMS': 1, 'PERFORMANCE_HINT': 'LATENCY'
    }


def load(message):
    import openvino as ov
    start = time.perf_counter()
    core = ov.Core()
    if message.get('cache_dir'):
        core.set_property({'CACHE_DIR': message['cache_dir']})
    requests, precisions = {}, {}
    for stage, xml in message['stages'].items():
        compiled = core.compile_model(xml, 'CPU', compile_config(message, stage))
        precisions[stage] = compiled_precision(compiled)
        requests[stage] = compiled.create_infer_request()
    return requests, {'version': ov.__version__, 'seconds': time.perf_counter() - start, 'precisions': precisions}


def run_stage(request, inputs):
    """One stage on ``inputs`` (numpy arrays) -> its first output (float32)."""
    import numpy as np
    return np.array(request.infer(inputs)[0], dtype=np.float32, copy=True)


def serve(reader: Connection, writer: Connection) -> int:
    requests, kept = {}, {}
    while True:
        try:
            message = reader.recv()
        except EOFError:
            return 0
        op = message.get('op')
        if op == 'exit':
            return 0
        try:
            if op == 'load':
                requests, info = load(message)
                reply = dict(info, ok=True)
            elif op == 'run':
                inputs = [kept[x] if isinstance(x, str) else x for x in message['inputs']]
                output = run_stage(requests[message['stage']], inputs)
                if message.get('keep'):
                    kept[message['keep']] = output
                    reply = {'ok': True, 'shape': output.shape}
                else:
                    reply = {'ok': True, 'output': output}
            else:
                reply = {'ok': False, 'error': f'unknown operation {op!r}'}
        except Exception as err:  # noqa: B902  (any failure of OpenVINO is the parent's to judge)
            reply = {'ok': False, 'error': f'{type(err).__name__}: {err}'.strip()}
        writer.send(reply)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    reader = Connection(int(args[0]), writable=False)
    writer = Connection(int(args[1]), readable=False)
    if os.path.exists('/proc/self/maps'):  # Linux
        PageTrimmer().start()
    return serve(reader, writer)


if __name__ == '__main__':
    sys.exit(main())
