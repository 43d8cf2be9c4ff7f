"""Reading text with TransOCR, in one place: ``read_text`` (a TransOCR module on float images: TOLA's validation, the
demo's scores) and ``TransOCRRecognizer`` (the ``recognition`` interface on uint8 images: the evaluation), the
paper's primary recognizer, our TransOCR module loaded strictly from the official ``transocr.pth``. Greedy decoding,
cut at the first END, START dropped, no conversion (the evaluation normalises text itself); confidence = mean
max-softmax probability of the emitted characters (of END for an empty string). Preprocessing 'difftsr' by default:
the same TransOCR path that produces TOLA's text prior (docs/evaluation.md, "Recognizers", says why); 'benchmark'
is FudanVI's. The text prior (DiffTSR's own string and IDM tokens) is text/text_prior.py's."""
from typing import List, Optional, Sequence

import numpy as np
import torch

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.ocr.recognition import Recognition, check_rgb_images
from tola_plugin.text.alphabets import TRANSOCR_NUM_CLASSES, decode_transocr


@torch.no_grad()
def read_text(model, images: torch.Tensor, max_steps: int = 24) -> List[Recognition]:
    """What the TransOCR ``model`` reads in ``images`` (B, 3, H, W) RGB in [0, 1]: B Recognitions (text in the
    TransOCR alphabet, confidence in (0, 1]), greedy for up to ``max_steps`` steps (``stop_at_end``: the steps
    after an image's END are never read)."""
    if model.num_classes != TRANSOCR_NUM_CLASSES:
        raise ValueError(f'reading text with TransOCR needs the {TRANSOCR_NUM_CLASSES}-class alphabet, this model has '
                         f'{model.num_classes} classes')
    ids, probs = model.greedy_decode(images, max_steps=max_steps, stop_at_end=True)
    out = []
    for row, prob in zip(ids.tolist(), probs.tolist()):
        length = row.index(model.end_index) if model.end_index in row else len(row)
        conf = float(np.mean(prob[:length])) if length else float(prob[0])
        out.append(Recognition(decode_transocr(row), conf))
    return out


class TransOCRRecognizer:
    """TransOCR (official checkpoint) as an evaluator. ``model`` may be given instead of ``checkpoint``."""

    name = 'transocr'

    def __init__(self, checkpoint: Optional[str] = None, device: str = 'cpu', preprocess: str = 'difftsr',
                 max_steps: int = 24, batch_size: int = 16, model=None):
        if (checkpoint is None) == (model is None):
            raise ValueError('TransOCRRecognizer: give exactly one of checkpoint (path to transocr.pth) or model')
        if model is None:
            model = load_transocr(checkpoint, preprocess=preprocess)
        elif model.preprocess_mode != preprocess:
            raise ValueError(f'TransOCRRecognizer: the model preprocesses with {model.preprocess_mode!r}, '
                             f'but preprocess={preprocess!r} was requested')
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        self.max_steps = max_steps
        self.batch_size = batch_size

    def __call__(self, images: Sequence[np.ndarray]) -> List[Recognition]:
        """RGB uint8 (H, W, 3) lines -> one Recognition each."""
        check_rgb_images(images)
        out: List[Recognition] = []
        # Batch consecutive images of equal size (TransOCR resizes each batch to 32x256 itself).
        i = 0
        while i < len(images):
            j = i + 1
            while j < len(images) and j - i < self.batch_size and images[j].shape == images[i].shape:
                j += 1
            rgb = np.stack(images[i:j]).astype(np.float32) / 255.0
            x = torch.from_numpy(rgb).permute(0, 3, 1, 2).to(self.device)
            out.extend(read_text(self.model, x, self.max_steps))
            i = j
        return out
