"""The OpenVINO worker: a child process that compiles TOLA's stages (OpenVINO IR), each in the precision its parent
asks, and runs them on the arrays its parent sends. Started by ``client.py``; OpenVINO is only ever loaded
here, so a crash of its kernels ends this process and the parent falls back to another path (docs/inference.md,
"Qualification").

    python worker.py READ_FD WRITE_FD

Messages (pickled dicts over ``multiprocessing.connection``): {'op': 'load', 'stages': {name: xml}, 'hints': {name:
'f32' | 'bf16' | 'f16'}, 'threads': n, 'cache_dir': path or None} -> {'ok': True, 'version', 'seconds', 'precisions':
{name: the precision its kernels compute in, ``compiled_precision``}}; {'op': 'run', 'stage': name, 'inputs': [arrays],
'keep': None} -> {'ok': True, 'output': float32 array}; with 'keep': a name, the output stays here under that name
(-> {'ok': True, 'shape': its shape}) and a later run's input may be that name (the text prior's encoder output, read
by each decoding step); {'op': 'exit'}. A failure is {'ok': False, 'error': message}. End of input (the parent gone)
ends the worker. Imports numpy, OpenVINO, the standard library and three stdlib-only modules of the package
(``resident_memory``, ``utils/procfs``, ``no_telemetry``; the package's ``__init__`` imports nothing heavy), so it
starts in well under a second. A thread keeps the weights files OpenVINO maps out of its resident memory
(``resident_memory.PageTrimmer``).

Each stage runs on one request with every thread on it (``compile_config``: one stream, LATENCY).
"""
import sys
import time
from multiprocessing.connection import Connection

from tola_plugin.runtime.openvino_backend.no_telemetry import block_openvino_telemetry
from tola_plugin.runtime.resident_memory import PageTrimmer
from tola_plugin.utils.procfs import mappings

block_openvino_telemetry()  # before OpenVINO is imported (no_telemetry.py says why)

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


def answer_requests(reader: Connection, writer: Connection) -> int:
    """The parent's requests ('load', 'run' a stage, 'exit'), one reply each, until it exits or closes the pipe."""
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
    if mappings():  # Linux
        PageTrimmer().start()
    return answer_requests(reader, writer)


if __name__ == '__main__':
    sys.exit(main())
