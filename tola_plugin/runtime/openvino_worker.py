"""The OpenVINO worker: a child process that compiles TOLA's stages (OpenVINO IR) in one precision and runs them on
the arrays its parent sends. Started by ``openvino_client.py``; OpenVINO is only ever loaded here, so a crash of its
kernels ends this process and the parent falls back to another path (docs/inference.md, "Qualification").

    python openvino_worker.py READ_FD WRITE_FD

Messages (pickled dicts over ``multiprocessing.connection``): {'op': 'load', 'stages': {name: xml}, 'hint': 'f32' |
'bf16' | 'f16', 'threads': n, 'cache_dir': path or None, 'streams': 1 | n | 'auto' (optional, 1)} -> {'ok': True,
'version', 'seconds', 'streams', 'requests'}; {'op': 'run', 'stage': name, 'inputs': [arrays], 'split': bool
(optional, False)} -> {'ok': True, 'output': float32 array}; {'op': 'exit'}. A failure is {'ok': False, 'error':
message}. End of input (the parent gone) ends the worker. Imports numpy, OpenVINO and the standard library only, so
it starts in well under a second.

Streams (``compile_config``): 1 is one stream with every thread on each request (LATENCY); n > 1 or 'auto' are
OpenVINO's throughput settings (THROUGHPUT hint, n streams or OpenVINO's choice, the threads shared among them),
with as many requests as OpenVINO advises (OPTIMAL_NUMBER_OF_INFER_REQUESTS): a run with 'split' (a stage whose
inputs and output have the batch first) splits its batch across them, in flight together (``run_stage``);
docs/inference.md, "Folders: streams".
"""
import sys
import time
from multiprocessing.connection import Connection


def compile_config(message) -> dict:
    """OpenVINO's CPU settings for the load message's precision hint, threads and streams (module docstring)."""
    config = {'INFERENCE_PRECISION_HINT': message['hint'], 'INFERENCE_NUM_THREADS': int(message['threads'])}
    streams = message.get('streams', 1)
    if streams == 1:
        config.update({'NUM_STREAMS': 1, 'PERFORMANCE_HINT': 'LATENCY'})
    else:
        config['PERFORMANCE_HINT'] = 'THROUGHPUT'
        if streams != 'auto':
            config['NUM_STREAMS'] = int(streams)
    return config


def load(message):
    import openvino as ov
    start = time.perf_counter()
    core = ov.Core()
    if message.get('cache_dir'):
        core.set_property({'CACHE_DIR': message['cache_dir']})
    config = compile_config(message)
    requests, streams, count = {}, 1, 1
    for stage, xml in message['stages'].items():
        compiled = core.compile_model(xml, 'CPU', config)
        streams = int(compiled.get_property('NUM_STREAMS'))
        if config['PERFORMANCE_HINT'] == 'THROUGHPUT':
            count = int(compiled.get_property('OPTIMAL_NUMBER_OF_INFER_REQUESTS'))
        requests[stage] = [compiled.create_infer_request() for _ in range(count)]
    info = {'version': ov.__version__, 'seconds': time.perf_counter() - start, 'streams': streams, 'requests': count}
    return requests, info


def batch_parts(inputs, requests: int) -> int:
    """Into how many chunks ``run_stage`` splits a run of batch-major ``inputs`` (numpy arrays): one per request,
    at most one per batch item; 1 (no split) unless every input has the same first dimension."""
    sizes = {x.shape[0] if x.ndim else -1 for x in inputs}
    return max(1, min(requests, sizes.pop())) if len(sizes) == 1 else 1


def run_stage(requests, inputs, split: bool = False):
    """One stage on ``inputs`` (numpy arrays) -> its first output (float32): on one request, or (``split``: the
    inputs and the output have the batch first) with several requests split along the batch into contiguous
    chunks, all in flight at once (each on a stream of its own) and joined in order."""
    import numpy as np
    parts = batch_parts(inputs, len(requests)) if split else 1
    if parts == 1:
        return np.array(requests[0].infer(inputs)[0], dtype=np.float32, copy=True)
    chunks = [np.array_split(x, parts) for x in inputs]
    busy = requests[:parts]
    for k, request in enumerate(busy):
        request.start_async([chunk[k] for chunk in chunks])
    errors = []
    for request in busy:  # every request is waited for: none is left busy for the next run when one failed
        try:
            request.wait()
        except Exception as err:  # noqa: B902  (OpenVINO's own error types; the first is reported)
            errors.append(err)
    if errors:
        raise errors[0]
    return np.concatenate([np.array(r.get_output_tensor(0).data, dtype=np.float32, copy=True) for r in busy])


def serve(reader: Connection, writer: Connection) -> int:
    requests = {}
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
                reply = {
                    'ok': True, 'output': run_stage(requests[message['stage']], message['inputs'],
                                                    bool(message.get('split')))
                }
            else:
                reply = {'ok': False, 'error': f'unknown operation {op!r}'}
        except Exception as err:  # noqa: B902  (any failure of OpenVINO is the parent's to judge)
            reply = {'ok': False, 'error': f'{type(err).__name__}: {err}'.strip()}
        writer.send(reply)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    reader = Connection(int(args[0]), writable=False)
    writer = Connection(int(args[1]), readable=False)
    return serve(reader, writer)


if __name__ == '__main__':
    sys.exit(main())
