"""The parent's side of the OpenVINO worker (``openvino_worker.py``): start it, have it compile each stage in its
precision (the path's per stage; the text prior's in fp32), learn the precision OpenVINO actually compiled each in
(``compiled_dtypes``: a hint it cannot honour on this CPU is replaced by what it can), run stages on CPU tensors, and
turn its death, a hang or an error into ``ChildFailure``. Each stage is compiled for one request at a time with every
thread on it (OpenVINO's throughput streams measured 1.00-1.07x on a folder and were removed: docs/inference.md,
"Folders: one stream").

Everything OpenVINO does happens in the worker: a kernel that crashes there (SIGSEGV) or never returns is a
``ChildFailure`` here, and the runtime moves on to the next path (``placement.Runtime.fail``). The worker's stderr
goes to a temporary file whose tail is part of the message.
"""
import os
import subprocess
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from tola_plugin.runtime.child_process import ChildFailure, child_environment, describe_exit, python_command

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'openvino_worker.py')
HINTS = {torch.float32: 'f32', torch.bfloat16: 'bf16', torch.float16: 'f16'}
DTYPES = {hint: dtype for dtype, hint in HINTS.items()}
#: seconds a worker may take to compile the stages / to run one stage before it counts as hung (full size on 2
#: cores: about 30 s to compile for bf16, 2 s per stage)
TIMEOUTS = {'load': 900.0, 'run': 600.0}


@dataclass(frozen=True)
class Kept:
    """A stage output left in the worker (``OpenVINOWorker.run(..., keep=name)``): an input of later runs by name."""
    name: str
    shape: Tuple[int, ...]


class OpenVINOWorker:
    """One worker process serving the stages of one cache entry (``stages``: stage -> IR), each compiled in its
    precision (``dtypes``: stage -> dtype, every stage); ``precisions``: each stage's precision as OpenVINO compiled
    it, as its kernels compute it ('f32', 'bf16', 'f16'; ``compiled_dtypes`` as torch dtypes)."""

    def __init__(self, stages: Dict[str, str], dtypes: Dict[str, torch.dtype], threads: int, cache_dir: Optional[str]):
        if set(dtypes) != set(stages):
            raise ValueError(f'the OpenVINO worker needs a precision for each stage {sorted(stages)}, got '
                             f'{sorted(dtypes)}')
        for name, precision in sorted(dtypes.items()):
            if precision not in HINTS:
                raise ValueError(f'the OpenVINO backend runs fp32, bf16 or fp16, got {precision} for {name}')
        self.dtypes = dict(dtypes)
        self.what = 'the OpenVINO worker (' + ', '.join(sorted({HINTS[d] for d in self.dtypes.values()})) + ')'
        to_child, from_parent = os.pipe()
        from_child, to_parent = os.pipe()
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                python_command(script=WORKER) + [str(to_child), str(to_parent)], pass_fds=(to_child, to_parent),
                env=child_environment({'OMP_NUM_THREADS': str(threads)}), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self.stderr)
        finally:
            os.close(to_child)
            os.close(to_parent)
        self.writer = Connection(from_parent, readable=False)
        self.reader = Connection(from_child, writable=False)
        hints = {stage: HINTS[d] for stage, d in self.dtypes.items()}
        self.info = self.call(
            {'op': 'load', 'stages': dict(stages), 'hints': hints, 'threads': int(threads), 'cache_dir': cache_dir},
            TIMEOUTS['load'])
        self.precisions = dict(self.info['precisions'])

    def dtype_of(self, stage: str) -> torch.dtype:
        """The precision ``stage`` was asked to compile in."""
        return self.dtypes[stage]

    @property
    def compiled_dtypes(self) -> Dict[str, torch.dtype]:
        """stage -> the dtype OpenVINO compiled it in (its kernels' precision)."""
        return {stage: DTYPES[precision] for stage, precision in self.precisions.items()}

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode('utf-8', 'replace')

    def _died(self) -> ChildFailure:
        code = self.proc.wait()
        return ChildFailure(self.what, describe_exit(code, self._stderr_tail()), code)

    def call(self, message: Dict, timeout: float) -> Dict:
        """Send ``message``, wait ``timeout`` seconds for the reply. The worker dead or hung (then killed):
        ChildFailure; an error it reports: ChildFailure naming the error (the worker lives on)."""
        if self.proc.poll() is not None:
            raise self._died()
        try:
            self.writer.send(message)
            if not self.reader.poll(timeout):
                self.close()
                raise ChildFailure(self.what, f'hung: no answer after {timeout:g} s, killed')
            reply = self.reader.recv()
        except (EOFError, OSError):
            raise self._died() from None
        if not reply.get('ok'):
            raise ChildFailure(self.what, reply.get('error', 'failed'))
        return reply

    def run(self, stage: str, *tensors, keep: Optional[str] = None):
        """One stage on CPU tensors (floats as fp32, integers as int64) or ``Kept`` outputs -> its fp32 output; with
        ``keep``, the output stays in the worker under that name and a ``Kept`` handle comes back."""
        feeds = []
        for tensor in tensors:
            if isinstance(tensor, Kept):
                feeds.append(tensor.name)
                continue
            if tensor.device.type != 'cpu':
                raise RuntimeError(f'the OpenVINO backend runs on the CPU, got a {tensor.device} tensor; use backend '
                                   'torch on a GPU')
            tensor = tensor.detach()
            feeds.append((tensor.float() if tensor.is_floating_point() else tensor.long()).contiguous().numpy())
        message = {'op': 'run', 'stage': stage, 'inputs': feeds, 'keep': keep}
        reply = self.call(message, TIMEOUTS['run'])
        if keep:
            return Kept(keep, tuple(reply['shape']))
        return torch.from_numpy(np.asarray(reply['output'], dtype=np.float32))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the worker (asked, then killed) and free its pipes."""
        if self.proc.poll() is None:
            try:
                self.writer.send({'op': 'exit'})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for conn in (self.writer, self.reader):
            conn.close()
        self.stderr.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: B902  (interpreter shutdown)
            pass
