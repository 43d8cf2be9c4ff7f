"""The runtime's stage runner: a network's stages (``archs/stage_runner.StageRunner``'s calls) routed to one function
``call(stage, *tensors) -> output`` over the stages of ``image_stages.py`` and ``text_prior_stages.py``: the OpenVINO
worker's run (``openvino_backend/backend.py``), or the recorder of the fp32 torch route that qualification compares
against (``qualification.record_reference``). Installed with ``TOLANet.running``.
"""
from typing import Callable, Tuple

import torch
from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

from tola_plugin.archs.precision import StageDtypes
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.transocr_arch import greedy_loop

Call = Callable[..., torch.Tensor]  # call(stage, *tensors) -> the stage's output (fp32), or a handle to it (KEPT)


class RoutedStages(StageRunner):
    """The image stages routed to ``call``, each computing in ``dtypes`` (as the runtime decided and, on OpenVINO, as
    it compiled them); with ``text`` the text prior's reading too (its encoder and greedy steps: the text encoder's
    output may stay where it ran, ``text_prior_stages.KEPT``), else TransOCR on torch. ``name``: the path, as the
    runtime's messages name it."""

    def __init__(self, call: Call, dtypes: StageDtypes, name: str, text: bool = True):
        super().__init__(dtypes, name)
        self.call, self.text = call, text

    def encode(self, net, image):
        return DiagonalGaussianDistribution(self.call('vae_encoder', image))

    def denoise(self, net, sample, timestep, context):
        timestep = torch.as_tensor(timestep, dtype=torch.long).reshape(-1).expand(sample.shape[0]).contiguous()
        return self.call('idm', sample, timestep, context)

    def decode(self, net, latent):
        return self.call('vae_decoder', latent)

    def read_text(self, net, images, max_steps, incremental, stop_at_end) -> Tuple[torch.Tensor, torch.Tensor]:
        """As ``TransOCR.greedy_decode`` (same ids, probs within float rounding), its encoder and its steps routed;
        ``incremental`` chooses between two torch decodings of the same function, of which the decoder stage is a
        third: it changes nothing here. ``net.transocr`` gives the preprocessing and the START / END ids."""
        if not self.text:
            return super().read_text(net, images, max_steps, incremental, stop_at_end)
        ocr = net.transocr
        memory = self.call('text_encoder', ocr.preprocess(images))

        def step(tokens, position):
            return self.call('text_decoder', tokens, memory).to(images.device)

        return greedy_loop(step, images.size(0), ocr.start_index, ocr.end_index, max_steps, stop_at_end, images.device)
