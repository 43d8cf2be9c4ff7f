"""The text prior's two stages (TransOCR's encoder and one greedy decoding step), each one function of tensors; a
runtime that runs them drives them with the one greedy loop (``archs/transocr_arch.greedy_loop``, which
``TransOCR.greedy_decode`` drives too: ``routed_stages.RoutedStages.read_text``).

- 'text_encoder': TransOCR's network input (B, 3, 32, 256) (``TransOCR.preprocess`` of the image, run by the caller:
  one resize) -> the cross-attention keys and values of the image tokens (B, 2, heads, N, d_k), N = 32: what the
  decoder's ``start_cache`` projects once
- 'text_decoder': the decoder inputs so far (B, L) int64 (START first; L dynamic) and the encoder's output -> the
  logits (B, C) of the last position: the causal self-attention on every row, as the full-prefix decoder, then the
  cross-attention, feed-forward and generator on the last row only: what both torch decodings compute (incremental
  and full prefix). (Its self-attention of the newest row alone, one query against L >= 16 keys, computed wrong
  results on OpenVINO 2025.4.1 once the IR was saved: measured on this machine, docs/inference.md.)

The encoder's output stays where the stages run (``KEPT``): a greedy step sends only the ids and gets the logits back.
"""
from typing import Dict

import torch
from torch import nn

PRIOR_STAGES = ('text_encoder', 'text_decoder')
KEPT = {'text_encoder': 'text_memory'}  # stage -> the name its output is kept under where the stages run


class TextEncoderStage(nn.Module):
    """TransOCR's network input -> the image tokens' cross-attention keys and values, stacked (B, 2, h, N, d_k)."""

    def __init__(self, transocr):
        super().__init__()
        self.transocr = transocr

    def forward(self, network_input):
        cache = self.transocr.decoder.start_cache(self.transocr.image_tokens(network_input))
        return torch.stack([cache['memory_k'], cache['memory_v']], 1)


class TextDecoderStage(nn.Module):
    """(decoder inputs so far (B, L), the encoder stage's output) -> the logits (B, C) of position L - 1."""

    def __init__(self, transocr):
        super().__init__()
        self.transocr = transocr

    def forward(self, tokens, memory):
        ocr = self.transocr
        # every row through the causal self-attention, as the full-prefix decoder; the rest on the last row only
        rows = ocr.decoder.self_attention_rows(ocr.token_inputs(tokens))
        last = ocr.decoder.cross_and_feed_forward(rows[:, -1:], memory[:, 0], memory[:, 1])
        return ocr.generator_word(last)[:, -1]


def prior_stage_modules(transocr: nn.Module) -> Dict[str, nn.Module]:
    """stage -> the torch module computing it (eval: no dropout)."""
    return {'text_encoder': TextEncoderStage(transocr).eval(), 'text_decoder': TextDecoderStage(transocr).eval()}
