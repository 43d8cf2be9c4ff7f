"""How a ``TOLAPipeline`` gets its network and its runtime (``PipelineLoading``, a mixin of ``TOLAPipeline``, as
diffusers keeps ``pipeline_utils`` apart from a pipeline): load a merged model or an option file, decide the requested
precision once, and place the network with the runtime (``tola_plugin.runtime.serving.Runtime``), which then serves
every batch (``Runtime.serve``). The pipeline itself (``pipeline.py``) restores: geometry, batching, assembly.

The precision: 'precision' of the ``switches`` is the request (checked here, before any weight is read); it goes to
the runtime, never into the network's config (the network's own switch, a merged file's recorded one, is the default
when none is asked). docs/architecture.md, "How --precision travels".
"""
from typing import Dict, Optional, Tuple

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.inference.demo_model import demo_model_path
from tola_plugin.runtime.plan import check_precision
from tola_plugin.runtime.serving import Runtime
from tola_plugin.utils.devices import resolve_device
from tola_plugin.utils.user_text import note


def precision_request(switches: Optional[Dict]) -> Tuple[Optional[str], Dict]:
    """(the requested precision, checked, or None: the model's own; the other switches) of TOLANet inference
    ``switches``."""
    switches = dict(switches or {})
    precision = switches.pop('precision', None)
    return (None if precision is None else check_precision(precision)), switches


class PipelineLoading:
    """``from_merged``, ``from_options`` and ``load`` build a pipeline with a runtime decision (``runtime``,
    ``plan``); ``set_switches``, ``to`` and ``close`` change or end it."""

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_merged(cls, path: Optional[str] = None, switches: Optional[Dict] = None, device=None,
                    backend: str = 'auto', allow_tf32: bool = False, requalify: bool = False, **options):
        """From a merged model (``tools/export_merged.py``) through ``TOLANet.load_for_inference`` (memory-mapped,
        inference-only); ``path`` None: the demo model (``demo_model.demo_model_path``: the shipped demo backbone and
        adaptation, merged once into the user's cache; from any folder). switches: TOLANet
        inference switches ({'precision': 'auto', 'timestep': 949, ...}; ``TOLANet.set_switches``; the precision is
        the runtime's request). device, backend ('auto', 'openvino', 'torch'), allow_tf32, requalify: where and how it
        runs (``tola_plugin.runtime.serving.Runtime``: by default CUDA when available, else the CPU with the IDM and
        VAE on OpenVINO where it qualifies; requalify drops this machine's cached verdicts of the model first).
        options: see ``TOLAPipeline``."""
        precision, switches = precision_request(switches)
        if path is None:
            path = demo_model_path(say=note)
        net = TOLANet.load_for_inference(path, **switches)
        return cls._placed(net, precision, device, backend, allow_tf32, requalify, path, options)

    @classmethod
    def from_options(cls, option_file: str, checkpoint: Optional[str] = None, switches: Optional[Dict] = None,
                     device=None, backend: str = 'auto', allow_tf32: bool = False, requalify: bool = False, **options):
        """From a TOLA option file (its ``network_g``) and adaptation checkpoint (default: its
        ``path.pretrain_network_g``), made inference-only (``TOLANet.prepare_for_inference``: LoRA merged, same
        outputs, no adapter overhead). switches, device, backend, allow_tf32, requalify: as ``from_merged``."""
        precision, switches = precision_request(switches)
        net = TOLANet.from_options(option_file, checkpoint, **switches).prepare_for_inference()
        return cls._placed(net, precision, device, backend, allow_tf32, requalify, None, options)

    @staticmethod
    def check_placement(device=None, backend: str = 'auto') -> None:
        """A device this machine does not have, or OpenVINO asked for on a GPU, is a ValueError now, before
        anything is read."""
        if backend == 'openvino' and resolve_device(None if device is None else str(device)).type != 'cpu':
            raise ValueError(f'backend openvino runs on the CPU, the device is {device} (use backend auto or torch)')
        resolve_device(None if device is None else str(device))

    @classmethod
    def load(cls, model: Optional[str] = None, opt: Optional[str] = None, checkpoint: Optional[str] = None,
             switches: Optional[Dict] = None, device=None, backend: str = 'auto', **options):
        """``from_options(opt, checkpoint, ...)`` when an option file is given, else ``from_merged(model, ...)`` (None:
        the demo model); the device and backend are checked before any weight is read."""
        if model is not None and opt is not None:
            raise ValueError('give a merged model or an option file, not both')
        if checkpoint is not None and opt is None:
            raise ValueError('checkpoint goes with an option file (a merged model already holds its adaptation)')
        cls.check_placement(device, backend)
        if opt is not None:
            return cls.from_options(opt, checkpoint, switches, device, backend, **options)
        return cls.from_merged(model, switches, device, backend, **options)

    @classmethod
    def _placed(cls, net, precision, device, backend, allow_tf32, requalify, source, options):
        pipe = cls(net, **options)
        pipe.runtime = Runtime(net, device, backend, allow_tf32, source, requalify, precision=precision)
        pipe.device = pipe.runtime.device
        return pipe

    # ------------------------------------------------------------------------------------------ the runtime
    @property
    def plan(self):
        """The runtime decision (``tola_plugin.runtime.plan.RuntimePlan``: device, backend, precision and why), or
        None for a network given as it is."""
        return self.runtime.plan if self.runtime is not None else None

    def describe_runtime(self) -> str:
        """Where and how the network runs, in one line (``RuntimePlan.describe``)."""
        if self.plan is not None:
            return self.plan.describe()
        return f'runtime: {self.device}, torch (the network as given, no runtime decision)'

    @property
    def backend(self) -> str:
        """'openvino' or 'torch': where the IDM and VAE run."""
        return self.plan.backend if self.plan is not None else 'torch'

    def set_switches(self, **switches):
        """Change the network's inference switches (precision, timestep, noise, ...: ``TOLANet.set_switches``); a new
        precision is the runtime's request, decided again (qualified where needed)."""
        precision = switches.pop('precision', None)
        self.net.set_switches(**switches)
        if precision is not None:
            if self.runtime is None:
                self.net.set_switches(precision=precision)
            else:
                self.runtime.replan(precision)
        return self

    def to(self, device, allow_tf32: bool = False):
        """Run on ``device`` ('cpu', 'cuda', 'cuda:1', ...): the runtime decides again there with the backend and the
        precision asked before ('auto': torch on a GPU; an explicit 'openvino' on a GPU is a ValueError), TF32 off on
        CUDA unless ``allow_tf32``; CUDA without a GPU is a ValueError."""
        if self.runtime is None:
            self.runtime = Runtime(self.net, device, 'torch', allow_tf32)
        else:
            backend, source, precision = self.runtime.backend, self.runtime.source.merged, self.runtime.precision
            self.runtime.close()
            self.runtime = Runtime(self.net, device, backend, allow_tf32, source, precision=precision)
        self.device = self.runtime.device
        return self

    def close(self) -> None:
        """End the runtime's worker process (OpenVINO), if any; the network then runs on torch as its own precision
        switch asks (``TOLANet.stage_dtypes``)."""
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
