"""The OpenVINO worker: a child process that compiles TOLA's stages (OpenVINO IR) in one precision and runs them on
the arrays its parent sends. Started by ``openvino_client.py``; OpenVINO is only ever loaded here, so a crash of its
kernels ends this process and the parent falls back to another path (docs/inference.md, "Qualification").

    python openvino_worker.py READ_FD WRITE_FD

Messages (pickled dicts over ``multiprocessing.connection``): {'op': 'load', 'stages': {name: xml}, 'hint': 'f32' |
'bf16' | 'f16', 'threads': n, 'cache_dir': path or None} -> {'ok': True, 'version', 'seconds'}; {'op': 'run',
'stage': name, 'inputs': [arrays], 'keep': None} -> {'ok': True, 'output': float32 array}; with 'keep': a name, the
output stays here under that name (-> {'ok': True, 'shape': its shape}) and a later run's input may be that name
(the text prior's encoder output, read by each decoding step); {'op': 'exit'}. A failure is {'ok':
False, 'error': message}. End of input (the parent gone) ends the worker. Imports numpy, OpenVINO and the standard
library only, so it starts in well under a second.
"""
import sys
import time
from multiprocessing.connection import Connection


def load(message):
    import openvino as ov
    start = time.perf_counter()
    core = ov.Core()
    if message.get('cache_dir'):
        core.set_property({'CACHE_DIR': message['cache_dir']})
    config = {
        'INFERENCE_PRECISION_HINT': message['hint'], 'INFERENCE_NUM_THREADS': int(message['threads']), 'NUM_STREAMS': 1,
        'PERFORMANCE_HINT': 'LATENCY'
    }
    requests = {}
    for stage, xml in message['stages'].items():
        requests[stage] = core.compile_model(xml, 'CPU', config).create_infer_request()
    return requests, {'version': ov.__version__, 'seconds': time.perf_counter() - start}


def serve(reader: Connection, writer: Connection) -> int:
    import numpy as np
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
                result = requests[message['stage']].infer(inputs)
                output = np.array(result[0], dtype=np.float32, copy=True)
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
    return serve(reader, writer)


if __name__ == '__main__':
    sys.exit(main())
