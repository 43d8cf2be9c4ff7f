"""TransOCR, the frozen recognizer that gives DiffTSR its text prior and TOLA its OCR loss.

Re-implementation of FudanVI's TransOCR as DiffTSR uses it (``model/TDM/models/transocr.py`` and
``text_prediction.py``; docs/transocr.md, "The official TransOCR"): a ResNet-34-style CNN encoder (BasicBlocks [3, 4,
6, 3], biased convs, 3×3 conv shortcuts) giving a (B, 1024, 2, 16) map for a 32×256 input, one post-LN transformer
decoder layer (masked self-attention, cross-attention to the 32 image tokens, ReLU FFN 1024→2048→1024), and a
Linear(1024, 7937) generator. The token input is a 512-d embedding × √512 concatenated with a 512-d sinusoidal table
(``pe.pe``). 83,904,779 parameters at default; the state dict (314 tensors, 87,520,435 numbers with the PE table and
BatchNorm statistics) has the official key names, so the official ``transocr.pth`` loads strictly
(``tola_plugin.archs.backbone_builder.load_transocr``).

Hand-written because no library block has this key layout (``linears.0..3`` +
``compress_attention_linear`` attention, ``a_2``/``b_2`` LayerNorm dividing by unbiased std + 1e-6,
biased 3×3-shortcut BasicBlocks); every op mirrors the official expression so fp32 results agree.
"""
import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.text.alphabets import TRANSOCR_NUM_CLASSES, TRANSOCR_START

PREPROCESS_MODES = ('difftsr', 'benchmark')


class TransOCRLayerNorm(nn.Module):
    """The official LayerNorm: a_2 * (x - mean) / (unbiased std + eps) + b_2 (not sqrt(var + eps))."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class TransOCRAttention(nn.Module):
    """Multi-head attention with the official layout: ``linears.0/1/2`` = q/k/v, ``linears.3`` = output.

    ``compress_attention_linear`` (Linear(heads, 1)) only serves the radical branch the word decoder does not
    use; it is kept because the checkpoint carries it.
    """

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        if d_model % heads:
            raise ValueError(f'TransOCR: d_model {d_model} is not divisible by num_heads {heads}')
        self.h = heads
        self.d_k = d_model // heads
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.compress_attention_linear = nn.Linear(heads, 1)
        self.dropout = nn.Dropout(dropout)

    def project(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """x (B, L, d) through ``linears[index]`` (0 = q, 1 = k, 2 = v), split into heads -> (B, h, L, d_k)."""
        return self.linears[index](x).view(x.size(0), -1, self.h, self.d_k).transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Projected q (B, h, Lq, d_k), k/v (B, h, Lk, d_k), mask (Lq, Lk) bool (True = attend) -> (B, Lq, d)."""
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float('-inf'))
        p_attn = self.dropout(F.softmax(scores, dim=-1))
        x = torch.matmul(p_attn, v).transpose(1, 2).contiguous().view(q.size(0), -1, self.h * self.d_k)
        return self.linears[3](x)

    def forward(self, query, key, value, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """query (B, Lq, d), key/value (B, Lk, d), mask (Lq, Lk) bool (True = attend) -> (B, Lq, d)."""
        return self.attend(self.project(query, 0), self.project(key, 1), self.project(value, 2), mask)


class TransOCRFeedForward(nn.Module):
    """w_2(dropout(relu(w_1(x))))."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class TransOCRDecoder(nn.Module):
    """One post-LN decoder layer: LN1(x + SelfAttn(x)), LN2(. + CrossAttn(., memory)), LN3(. + FFN(.))."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.mask_multihead = TransOCRAttention(d_model, heads, dropout)
        self.mul_layernorm1 = TransOCRLayerNorm(d_model)
        self.multihead = TransOCRAttention(d_model, heads, dropout)
        self.mul_layernorm2 = TransOCRLayerNorm(d_model)
        self.pff = TransOCRFeedForward(d_model, d_ff, dropout)
        self.mul_layernorm3 = TransOCRLayerNorm(d_model)

    def forward(self, text: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """text (B, L, d) token inputs, memory (B, N, d) image tokens -> (B, L, d) (causal self-attention)."""
        return self.cross_and_feed_forward(
            self.self_attention_rows(text), self.multihead.project(memory, 1), self.multihead.project(memory, 2))

    def self_attention_rows(self, text: torch.Tensor) -> torch.Tensor:
        """The first sub-layer on every row: LN1(text + causal self-attention(text)), (B, L, d) -> (B, L, d)."""
        length = text.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=text.device).tril()
        return self.mul_layernorm1(text + self.mask_multihead(text, text, text, mask=causal))

    def cross_and_feed_forward(self, result: torch.Tensor, memory_k: torch.Tensor,
                               memory_v: torch.Tensor) -> torch.Tensor:
        """The other two sub-layers: LN3(. + FFN(.)) of LN2(result + cross-attention to the image tokens' projected
        keys/values (B, h, N, d_k)); (B, L, d) -> (B, L, d), row by row."""
        cross = self.multihead.attend(self.multihead.project(result, 0), memory_k, memory_v)
        result = self.mul_layernorm2(result + cross)
        return self.mul_layernorm3(result + self.pff(result))

    def start_cache(self, memory: torch.Tensor) -> Dict[str, Optional[torch.Tensor]]:
        """The decoding cache for ``step``: the cross-attention keys/values of ``memory`` (B, N, d), projected
        once, and empty self-attention keys/values."""
        return {
            'memory_k': self.multihead.project(memory, 1), 'memory_v': self.multihead.project(memory, 2), 'k': None,
            'v': None
        }

    def step(self, text: torch.Tensor, cache: Dict[str, Optional[torch.Tensor]]) -> torch.Tensor:
        """The newest position only: text (B, 1, d) -> (B, 1, d), equal to the last row of ``forward`` on the
        whole prefix. With one causal layer the newest row needs the prefix's self-attention keys/values (which
        depend only on the token inputs, so they are cached in ``cache`` and this step's are appended) and no
        other output row."""
        attn = self.mask_multihead
        k, v = attn.project(text, 1), attn.project(text, 2)
        cache['k'] = k if cache['k'] is None else torch.cat([cache['k'], k], 2)
        cache['v'] = v if cache['v'] is None else torch.cat([cache['v'], v], 2)
        result = self.mul_layernorm1(text + attn.attend(attn.project(text, 0), cache['k'], cache['v']))
        return self.cross_and_feed_forward(result, cache['memory_k'], cache['memory_v'])


class TransOCRBasicBlock(nn.Module):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); biased 3×3 convs, 3×3 conv+BN shortcut."""

    def __init__(self, inplanes: int, planes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = (
            nn.Sequential(nn.Conv2d(inplanes, planes, 3, 1, 1), nn.BatchNorm2d(planes)) if inplanes != planes else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        residual = x if self.downsample is None else self.downsample(x)
        return F.relu(out + residual)


class TransOCREncoder(nn.Module):
    """The official ResNet: stem conv1(→64)+pool, conv2(→128); stages 1-3 = pool, BasicBlocks, conv+BN+ReLU;
    stage 4 = BasicBlocks (no pool), ``layer4_conv2`` (→ out_channels)+BN+ReLU. 4 max-pools: (32, 256) -> (2, 16).
    """

    def __init__(self, in_channels: int, stem_channels: Sequence[int], stage_channels: Sequence[int],
                 stage_blocks: Sequence[int], out_channels: int):
        super().__init__()
        if len(stem_channels) != 2 or len(stage_channels) != 4 or len(stage_blocks) != 4:
            raise ValueError('TransOCR: stem_channels needs 2 entries, stage_channels and stage_blocks 4 each; got '
                             f'{list(stem_channels)}, {list(stage_channels)}, {list(stage_blocks)}')
        self.conv1 = nn.Conv2d(in_channels, stem_channels[0], 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(stem_channels[0])
        self.conv2 = nn.Conv2d(stem_channels[0], stem_channels[1], 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(stem_channels[1])
        prev = stem_channels[1]
        for i, (channels, blocks) in enumerate(zip(stage_channels, stage_blocks), start=1):
            layers = [TransOCRBasicBlock(prev, channels)]
            layers += [TransOCRBasicBlock(channels, channels) for _ in range(1, blocks)]
            setattr(self, f'layer{i}', nn.Sequential(*layers))
            prev = channels
            if i < 4:
                setattr(self, f'layer{i}_conv', nn.Conv2d(channels, channels, 3, 1, 1))
                setattr(self, f'layer{i}_bn', nn.BatchNorm2d(channels))
        self.layer4_conv2 = nn.Conv2d(prev, out_channels, 3, 1, 1)
        self.layer4_conv2_bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C_in, H, W) -> (B, out_channels, H/16, W/16)."""
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        for i in (1, 2, 3):
            x = getattr(self, f'layer{i}')(F.max_pool2d(x, 2, 2))
            x = F.relu(getattr(self, f'layer{i}_bn')(getattr(self, f'layer{i}_conv')(x)))
        x = self.layer4(x)  # the official code defines layer4_pool but does not apply it
        return F.relu(self.layer4_conv2_bn(self.layer4_conv2(x)))


class TransOCRPositionalTable(nn.Module):
    """The sinusoidal table as the buffer ``pe`` (1, max_len, dim), computed exactly as the official code
    (float32 torch sin/cos). A loaded checkpoint's ``pe.pe`` replaces it (it can differ by an ulp)."""

    def __init__(self, dim: int, max_len: int):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, dim, 2).float() * -(math.log(10000.0) / dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe.unsqueeze(0))

    def forward(self, length: int) -> torch.Tensor:
        """-> (1, length, dim)."""
        if length > self.pe.size(1):
            raise ValueError(f'TransOCR: sequence length {length} exceeds the positional table ({self.pe.size(1)})')
        return self.pe[:, :length]


class TransOCRTokenEmbedding(nn.Module):
    """``lut`` embedding × √dim."""

    def __init__(self, num_classes: int, dim: int):
        super().__init__()
        self.lut = nn.Embedding(num_classes, dim)
        self.dim = dim

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lut(tokens) * math.sqrt(self.dim)


class TransOCRGenerator(nn.Module):
    """``proj``: Linear(d_model, num_classes) -> logits."""

    def __init__(self, d_model: int, num_classes: int):
        super().__init__()
        self.proj = nn.Linear(d_model, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@ARCH_REGISTRY.register()
class TransOCR(nn.Module):
    """TransOCR word recognizer (official key layout). Images in, class logits / greedy tokens out.

    Args:
        num_classes: output classes (7937 = START, '\\xad', 7934 characters, END). START = 0, END = num_classes-1.
        embed_dim: token embedding and PE width (512); the decoder width is 2 * embed_dim.
        pe_max_len: rows of the positional table (7000).
        in_channels: image channels (3, RGB).
        stem_channels: widths of the two stem convs ((64, 128)).
        stage_channels: widths of the four BasicBlock stages ((256, 256, 512, 512)).
        stage_blocks: BasicBlocks per stage ((3, 4, 6, 3)).
        num_heads: attention heads (4).
        ff_dim: FFN hidden width (2048).
        dropout: dropout of the PE, attention maps and FFN (0.1; active only in train mode).
        image_size: network input (H, W) = (32, 256).
        preprocess: 'difftsr' (default; DiffTSR's Text_Prediction: nearest resize of the [0, 1] RGB image,
            no normalisation; for 128×512 it is x[:, :, ::4, ::2]) or 'benchmark' (FudanVI's pipeline: bilinear
            resize, antialiased like PIL's, then (x - 0.5) / 0.5 to [-1, 1]; PIL's uint8 rounding is not copied).
        frozen: if True, parameters get requires_grad=False and ``train()`` keeps the module in eval mode
            (running BatchNorm statistics, no dropout), so a parent model's ``.train()`` cannot change the
            recognizer; gradients still flow to the input image. Default False (plain nn.Module behaviour).
    """

    def __init__(self, num_classes: int = TRANSOCR_NUM_CLASSES, embed_dim: int = 512, pe_max_len: int = 7000,
                 in_channels: int = 3, stem_channels: Sequence[int] = (64, 128),
                 stage_channels: Sequence[int] = (256, 256, 512, 512), stage_blocks: Sequence[int] = (3, 4, 6, 3),
                 num_heads: int = 4, ff_dim: int = 2048, dropout: float = 0.1, image_size: Sequence[int] = (32, 256),
                 preprocess: str = 'difftsr', frozen: bool = False):
        super().__init__()
        if preprocess not in PREPROCESS_MODES:
            raise ValueError(f'TransOCR: preprocess must be one of {PREPROCESS_MODES}, got {preprocess!r}')
        if len(image_size) != 2:
            raise ValueError(f'TransOCR: image_size must be (H, W), got {image_size!r}')
        d_model = 2 * embed_dim
        # the architecture arguments, for files that must rebuild this network (merged export, demo backbone)
        self.arch_options = dict(num_classes=num_classes, embed_dim=embed_dim, pe_max_len=pe_max_len,
                                 in_channels=in_channels, stem_channels=list(stem_channels),
                                 stage_channels=list(stage_channels), stage_blocks=list(stage_blocks),
                                 num_heads=num_heads, ff_dim=ff_dim, dropout=dropout, image_size=list(image_size),
                                 preprocess=preprocess)
        self.num_classes = num_classes
        self.start_index = TRANSOCR_START
        self.end_index = num_classes - 1
        self.image_size = tuple(int(s) for s in image_size)
        self.preprocess_mode = preprocess
        self.embedding_word = TransOCRTokenEmbedding(num_classes, embed_dim)
        self.pe = TransOCRPositionalTable(embed_dim, pe_max_len)
        self.pe_dropout = nn.Dropout(dropout)
        self.encoder = TransOCREncoder(in_channels, stem_channels, stage_channels, stage_blocks, d_model)
        self.decoder = TransOCRDecoder(d_model, num_heads, ff_dim, dropout)
        self.generator_word = TransOCRGenerator(d_model, num_classes)
        self.frozen = bool(frozen)
        if self.frozen:
            self.requires_grad_(False)
            self.eval()

    def train(self, mode: bool = True):
        """nn.Module.train, except that a frozen TransOCR always stays in eval mode."""
        return super().train(False if getattr(self, 'frozen', False) else mode)

    # ----------------------------------------------------------------------------------------- pieces
    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) RGB in [0, 1] -> (B, 3, 32, 256) network input ([0, 1] for 'difftsr', [-1, 1] for
        'benchmark'). Differentiable."""
        if images.dim() != 4:
            raise ValueError(f'TransOCR expects images of shape (B, C, H, W), got {tuple(images.shape)}')
        if self.preprocess_mode == 'difftsr':
            return F.interpolate(images, size=self.image_size)  # default mode 'nearest', as Text_Prediction
        resized = F.interpolate(images, size=self.image_size, mode='bilinear', align_corners=False, antialias=True)
        return (resized - 0.5) / 0.5

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [0, 1] -> image tokens (B, N, d_model), N = 32 at 32×256."""
        return self.image_tokens(self.preprocess(images))

    def image_tokens(self, network_input: torch.Tensor) -> torch.Tensor:
        """The network input (``preprocess``'s) -> image tokens (B, N, d_model)."""
        feature = self.encoder(network_input)
        b, c, h, w = feature.shape
        return feature.view(b, c, h * w).permute(0, 2, 1).contiguous()

    def decode(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """tokens (B, L) decoder input ids (START first), memory (B, N, d) -> logits (B, L, C)."""
        return self.generator_word(self.decoder(self.token_inputs(tokens), memory))

    def token_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """Decoder input ids (B, L) -> the decoder's inputs (B, L, d): embedding and positional table side by side."""
        embedding = self.embedding_word(tokens)
        return torch.cat([embedding, self.pe_dropout(self.pe(tokens.size(1)).expand_as(embedding))], 2)

    def decode_step(self, tokens: torch.Tensor, position: int, cache: Dict[str,
                                                                           Optional[torch.Tensor]]) -> torch.Tensor:
        """One incremental step: tokens (B, 1) the decoder input at ``position`` (0 = START), ``cache`` from
        ``decoder.start_cache`` holding positions < ``position`` -> logits (B, C) of that position."""
        embedding = self.embedding_word(tokens)
        pe = self.pe_dropout(self.pe(position + 1)[:, position:].expand_as(embedding))
        return self.generator_word(self.decoder.step(torch.cat([embedding, pe], 2), cache))[:, -1]

    # ------------------------------------------------------------------------------------------ API
    def forward(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Teacher forcing for a cross-entropy loss.

        images (B, 3, H, W) RGB in [0, 1]; targets (B, L) class ids ending with END, padded with -100 after it.
        The decoder input is START + targets[:, :-1] (pads replaced by START, as the official converter's
        zero padding). Returns logits (B, L, num_classes); rows after END are meaningless (ignored by CE with
        ignore_index=-100). Differentiable w.r.t. images.
        """
        if targets.dim() != 2 or targets.size(0) != images.size(0):
            raise ValueError(f'TransOCR: targets must be (B, L) with B = {images.size(0)}, got {tuple(targets.shape)}')
        valid = targets != -100
        if ((targets[valid] < 0) | (targets[valid] >= self.num_classes)).any():
            raise ValueError(f'TransOCR: target ids must be in [0, {self.num_classes}) or -100')
        start = torch.full_like(targets[:, :1], self.start_index)
        text_input = torch.cat([start, targets[:, :-1].masked_fill(~valid[:, :-1], self.start_index)], 1)
        return self.decode(text_input, self.encode(images))

    def greedy_decode(self, images: torch.Tensor, max_steps: int = 24, incremental: bool = True,
                      stop_at_end: bool = False, late_stop: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Greedy autoregressive decoding from START for up to ``max_steps`` steps.

        Returns ids (B, S) long (argmax of the step softmax, START excluded) and probs (B, S) float in (0, 1]
        (that softmax maximum; differentiable w.r.t. images). S = max_steps, or fewer with ``stop_at_end``.

        incremental: True (default): each step runs only the newest position, with the self-attention
            keys/values of the prefix cached and the cross-attention keys/values of the image tokens projected
            once (``TransOCRDecoder.step``). False: the official loop, which re-runs the decoder on the whole
            prefix every step and keeps the last row. Both compute the same function; the GEMM shapes differ,
            so the probabilities differ by float32 rounding (measured on the full-size parity fixture, in one
            process: 1.5e-6 relative) and the ids are the same wherever the argmax is not a near-tie.
        stop_at_end: stop after the first step at which every image has emitted END (at least once), so
            S <= max_steps; the steps after an image's END are never read by the text prior or ``read_text`` (ocr/).
            False (default): always ``max_steps`` steps (the official loop has no early stop).
        late_stop: with ``stop_at_end``, read "every image ended" one step late (``EndFlag``: no wait on a GPU per
            step); at most one step more (S <= max_steps still), which nothing reads.
        """
        memory = self.encode(images)
        if incremental:
            cache = self.decoder.start_cache(memory)

            def step(tokens, position):
                return self.decode_step(tokens[:, -1:], position, cache)
        else:

            def step(tokens, position):
                return self.decode(tokens, memory)[:, -1]

        return greedy_loop(step, images.size(0), self.start_index, self.end_index, max_steps, stop_at_end,
                           images.device, late_stop)


class EndFlag:
    """Whether every image has ended, read one step late: ``push(ended)`` starts copying this step's flag to the host
    and returns the previous step's (False at the first). On CUDA (``cuda_copy``) only the previous step's copy is
    waited for, while this step's kernels are queued: the device never idles for the host, as it does every step
    for the immediate ``bool(ended.all())``. ``copy``: flag -> (host value, its wait or None) (tests inject it)."""

    def __init__(self, device, copy=None):
        self.copy = copy or (cuda_copy if torch.device(device).type == 'cuda' else lambda flag: (flag, None))
        self.previous = (False, None)

    def push(self, ended: torch.Tensor) -> bool:
        (value, wait), self.previous = self.previous, self.copy(ended.all())
        if wait is not None:
            wait()
        return bool(value)


def cuda_copy(flag: torch.Tensor):
    """A CUDA scalar -> (the pinned host tensor it is being copied into, the wait for that copy: an event's)."""
    host = torch.empty((), dtype=flag.dtype, pin_memory=True)
    host.copy_(flag, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event.synchronize


def greedy_loop(step: Callable[[torch.Tensor, int], torch.Tensor], batch: int, start_index: int, end_index: int,
                max_steps: int, stop_at_end: bool, device, late_stop=False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The greedy decoding loop of ``TransOCR.greedy_decode``, whatever computes a step (the torch decoder, or the
    decoder stage of another runtime: ``tola_plugin.runtime.text_prior_stages``): ``step(tokens, position)`` takes
    the decoder inputs so far (B, position + 1) long (START first) and returns the logits (B, C) of ``position``.
    -> ids (B, S) long, probs (B, S) float (``greedy_decode``'s; ``late_stop``: its ``EndFlag``)."""
    if late_stop and not stop_at_end:
        raise ValueError('greedy decoding: late_stop says when to read the stop at END; it needs stop_at_end=True')
    tokens = torch.full((batch, 1), start_index, dtype=torch.long, device=device)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    flag = EndFlag(device) if late_stop else None
    ids, probs = [], []
    for position in range(max_steps):
        logits = step(tokens, position)
        prob, index = torch.max(torch.softmax(logits, -1), -1)  # argmax of the softmax, as the official loop
        ids.append(index)
        probs.append(prob)
        tokens = torch.cat([tokens, index.view(-1, 1)], 1)
        if stop_at_end:
            ended |= index == end_index
            if flag.push(ended) if flag is not None else bool(ended.all()):
                break
    return torch.stack(ids, 1), torch.stack(probs, 1)
