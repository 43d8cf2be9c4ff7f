"""The benchmark's networks: the reference route (DiffTSR's way), the merged file, and each route placed by the
runtime decision (``tola_plugin.runtime``)."""
import gc

from tola_lab.benchmarks.benchmarking import build_benchmark_tola
from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.runtime.serving import Runtime
from tola_plugin.utils.user_text import say


def build_reference(opt_path: str, checkpoint, random_weights: bool):
    """The option file's TOLANet with its adaptation state (or, with ``random_weights``, the full-size random
    backbone with seeded random LoRA/LRC values), LoRA unmerged, on the reference route."""
    net = build_benchmark_tola(opt_path, random_weights, adaptation=True, checkpoint=checkpoint)
    return net.set_switches(text_decoding='full_prefix', precision='fp32').eval()


def export_merged(opt_path: str, checkpoint, random_weights: bool, path: str) -> None:
    """Write the merged file of the reference network (built afresh: merging changes the network in place)."""
    build_reference(opt_path, checkpoint, random_weights).save_merged(path)
    gc.collect()


def load_route(route: str, merged: str, device):
    """The inference network of ``route`` from the merged file, placed by the runtime decision (its plan:
    ``Runtime.plan``): 'auto' is what the entry points run here (backend auto, precision auto); '<backend>
    <precision>' (e.g. 'openvino bf16') insists on that path. -> (net, its Runtime); a path that does not qualify on
    this machine raises NoPathLeft with the reason."""
    if route == 'auto':
        backend, precision = 'auto', 'auto'
    else:
        backend, precision = route.split()
    net = TOLANet.load_for_inference(merged)
    return net, Runtime(net, device, backend, source=merged, say=say, precision=precision)


def runtime_weight_bytes(net) -> int:
    """Bytes of the parameters and buffers a TOLANet forward runs (the MoM image branch, which only feeds the TDM,
    is not counted; the inference path never loads it)."""
    skip = tuple(f'mom.{p}' for p in DiffTSRMoM.IMAGE_BRANCH)
    return sum(t.numel() * t.element_size() for k, t in net.state_dict().items() if not k.startswith(skip))
