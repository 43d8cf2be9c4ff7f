"""The parent's side of the OpenVINO worker (``worker.py``): start it, have it compile each stage in its
precision (the path's ``StageDtypes``, turned into OpenVINO's precision hints here, at the process boundary; the text
prior's in fp32), learn the precision OpenVINO actually compiled each in (``compiled``: a hint it cannot honour on
this CPU is replaced by what it can), run stages on CPU tensors, and
turn its death, a hang or an error into ``ChildFailure``. Each stage is compiled for one request at a time with every
thread on it (OpenVINO's throughput streams measured 1.00-1.07x on a folder and were removed: docs/inference.md,
"Folders: one stream").

Everything OpenVINO does happens in the worker: a kernel that crashes there (SIGSEGV) or never returns is a
``ChildFailure`` here, and the runtime moves on to the next path (``serving.Runtime.fail``). The worker's stderr
goes to a temporary file whose tail is part of the message.
"""
import contextlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from tola_plugin.archs.precision import StageDtypes
from tola_plugin.runtime.child_process import ChildFailure, child_environment, describe_exit, python_command
from tola_plugin.runtime.image_stages import IMAGE_STAGES

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'worker.py')
HINTS = {torch.float32: 'f32', torch.bfloat16: 'bf16', torch.float16: 'f16'}
DTYPES = {hint: dtype for dtype, hint in HINTS.items()}
#: the text prior's stages compile in fp32 on every path, as torch runs them: in bf16 its greedy ids differed from
#: fp32's on 7 of the demo model's 32 held-out lines (OpenVINO 2025.4.1, docs/inference.md "Precision"), and ids are
#: what it gives
PRIOR_DTYPE = torch.float32
#: seconds a worker may take to compile the stages / to run one stage before it counts as hung (full size on 2
#: cores: about 30 s to compile for bf16, 2 s per stage)
TIMEOUTS = {'load': 900.0, 'run': 600.0}


@dataclass(frozen=True)
class Kept:
    """A stage output left in the worker (``OpenVINOWorker.run(..., keep=name)``): an input of later runs by name."""
    name: str
    shape: Tuple[int, ...]


class OpenVINOWorker:
    """One worker process serving the stages of one cache entry (``stages``: stage -> IR), each image stage compiled in
    its precision of ``dtypes`` (a path's), the text prior's in fp32 (``PRIOR_DTYPE``; ``dtype_of``); ``precisions``:
    each stage's precision as OpenVINO compiled it, as its kernels compute it ('f32', 'bf16', 'f16'; ``compiled``
    as the path's ``StageDtypes``)."""

    def __init__(self, stages: Dict[str, str], dtypes: StageDtypes, threads: int, cache_dir: Optional[str]):
        for name in IMAGE_STAGES:
            if dtypes[name] not in HINTS:
                raise ValueError(f'the OpenVINO backend runs fp32, bf16 or fp16, got {dtypes[name]} for {name}')
        self.dtypes = dtypes
        hints = {stage: HINTS[self.dtype_of(stage)] for stage in stages}
        self.what = 'the OpenVINO worker (' + ', '.join(sorted(set(hints.values()))) + ')'
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
        self.info = self.call(
            {'op': 'load', 'stages': dict(stages), 'hints': hints, 'threads': int(threads), 'cache_dir': cache_dir},
            TIMEOUTS['load'])
        self.precisions = dict(self.info['precisions'])

    def dtype_of(self, stage: str) -> torch.dtype:
        """The precision ``stage`` is asked to compile in."""
        return self.dtypes[stage] if stage in IMAGE_STAGES else PRIOR_DTYPE

    @property
    def compiled(self) -> StageDtypes:
        """The path's dtypes as the worker computes them: each image stage in the precision OpenVINO compiled."""
        return self.dtypes.replace(**{stage: DTYPES[self.precisions[stage]] for stage in IMAGE_STAGES})

    def _died(self) -> ChildFailure:
        code = self.proc.wait()
        self.stderr.seek(0)
        return ChildFailure(self.what, describe_exit(code, self.stderr.read().decode('utf-8', 'replace')), code)

    def call(self, message: Dict, timeout: float) -> Dict:
        """Send ``message``, wait ``timeout`` seconds for the reply. The worker dead or hung (then killed):
        ChildFailure; an error it reports: ChildFailure naming the error (the worker lives on)."""
        if self.proc.poll() is not None:
            raise self._died()
        try:
            self.writer.send(message)
            if not self.reader.poll(timeout):
                self.close(ask=False)  # a worker that does not answer would not answer 'exit' either
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

    def close(self, ask: bool = True) -> None:
        """End the worker (asked, then killed after 5 s; ``ask`` false: killed at once) and free its pipes."""
        if ask and self.proc.poll() is None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # then killed below
                self.writer.send({'op': 'exit'})
                self.proc.wait(timeout=5)
        if self.proc.poll() is None:
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
