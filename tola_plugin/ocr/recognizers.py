"""Text recognizers of the evaluation behind one interface.

``recognizer(images)`` takes a list of HxWx3 uint8 **BGR** arrays (what cv2.imread returns) and returns one
``Recognition(text, confidence)`` per image: the raw recognizer string (normalization happens in
``text_metrics``) and a confidence in [0,1].

- ``TransOCRRecognizer``: the paper's primary recognizer, our TransOCR module loaded strictly from the
  official ``transocr.pth``. Greedy decoding, cut at the first END; confidence = mean max-softmax probability
  of the emitted characters (of END for an empty string). Preprocessing 'difftsr' by default: the same
  TransOCR path that produces TOLA's text prior (see docs/evaluation.md for why); 'benchmark' is FudanVI's.
- ``PPOCRv4Recognizer``: the independent cross-check, PaddleOCR's Chinese PP-OCRv4 mobile recognition model
  as shipped inside the rapidocr-onnxruntime 1.4.4 wheel, recognition only (no detection, no orientation
  classifier), same preprocessing as PaddleOCR 2.7.3 (height 48, width padded to >= 320, batches of 6).
  Confidence = rapidocr's mean max-probability of the kept CTC frames. No network: the model is in the wheel
  and onnxruntime telemetry is disabled before it is imported.
"""
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.text.alphabets import decode_transocr

RECOGNIZERS = ('transocr', 'ppocrv4')
# Column prefixes of the per-image CSV and the summary: T-ACC/T-NED, P-ACC/P-NED as in the paper's tables.
PREFIX = {'transocr': 't_', 'ppocrv4': 'p_'}


@dataclass(frozen=True)
class Recognition:
    text: str
    confidence: float


def _check_images(images: Sequence[np.ndarray]) -> None:
    for i, img in enumerate(images):
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(f'recognizer input {i}: expected an HxWx3 uint8 BGR array, got '
                             f'{getattr(img, "dtype", type(img))} {getattr(img, "shape", "")}')


class TransOCRRecognizer:
    """TransOCR (official checkpoint) as an evaluator. ``model`` may be given instead of ``checkpoint``."""

    name = 'transocr'

    def __init__(self, checkpoint: Optional[str] = None, device: str = 'cpu', preprocess: str = 'difftsr',
                 max_steps: int = 24, batch_size: int = 16, model=None):
        import torch
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
        import torch

        _check_images(images)
        out: List[Recognition] = []
        end = self.model.end_index
        # Batch consecutive images of equal size (TransOCR resizes each batch to 32x256 itself).
        i = 0
        while i < len(images):
            j = i + 1
            while j < len(images) and j - i < self.batch_size and images[j].shape == images[i].shape:
                j += 1
            rgb = np.stack([img[:, :, ::-1] for img in images[i:j]]).astype(np.float32) / 255.0
            x = torch.from_numpy(rgb).permute(0, 3, 1, 2).to(self.device)
            with torch.no_grad():
                ids, probs = self.model.greedy_decode(x, max_steps=self.max_steps, stop_at_end=True)  # cut at END below
            for row, prob in zip(ids.tolist(), probs.tolist()):
                length = row.index(end) if end in row else len(row)
                conf = float(np.mean(prob[:length])) if length else float(prob[0])
                out.append(Recognition(decode_transocr(row), conf))
            i = j
        return out


def rapidocr_model_config(section: str, num_threads: int) -> dict:
    """rapidocr-onnxruntime 1.4.4's config of one model ('Det', 'Cls' or 'Rec'), its ONNX file resolved inside
    the wheel (an error naming the file when it is missing) and ``num_threads`` ONNX Runtime threads."""
    import rapidocr_onnxruntime
    from rapidocr_onnxruntime.utils import read_yaml
    root = os.path.dirname(os.path.abspath(rapidocr_onnxruntime.__file__))
    config = read_yaml(os.path.join(root, 'config.yaml'))[section]
    config['model_path'] = os.path.join(root, config['model_path'])
    if not os.path.isfile(config['model_path']):
        what = {'Det': 'detection', 'Cls': 'orientation', 'Rec': 'recognition'}[section]
        raise FileNotFoundError(f'PP-OCRv4 {what} model not found at {config["model_path"]!r}; it ships inside '
                                f'the rapidocr-onnxruntime==1.4.4 wheel (pip install rapidocr-onnxruntime==1.4.4)')
    config['intra_op_num_threads'] = num_threads
    config['inter_op_num_threads'] = num_threads
    return config


def _rapidocr_rec_config(num_threads: int) -> dict:
    return rapidocr_model_config('Rec', num_threads)


class PPOCRv4Recognizer:
    """PP-OCRv4 Chinese mobile recognizer (rapidocr-onnxruntime 1.4.4, ONNX inside the wheel), rec only."""

    name = 'ppocrv4'
    MODEL_FILE = 'ch_PP-OCRv4_rec_infer.onnx'

    def __init__(self, num_threads: int = -1, batch_size: int = 6):
        # onnxruntime >= 1.30 starts a telemetry thread at import unless this is set first.
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
        from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer
        config = _rapidocr_rec_config(num_threads)
        if os.path.basename(config['model_path']) != self.MODEL_FILE:
            raise ValueError(f'rapidocr config names {config["model_path"]!r}, expected {self.MODEL_FILE}; '
                             f'install rapidocr-onnxruntime==1.4.4')
        config['rec_batch_num'] = batch_size  # PaddleOCR 2.7.3's rec_batch_num is 6 too
        self.model_path = config['model_path']
        self.engine = TextRecognizer(config)

    def __call__(self, images: Sequence[np.ndarray]) -> List[Recognition]:
        _check_images(images)
        if not images:
            return []
        results, _ = self.engine(list(images))
        return [Recognition(str(text), float(conf)) for text, conf in results]


def ppocrv4_unavailable() -> Optional[str]:
    """None when the PP-OCRv4 model can be built offline, else why not (package or model file missing)."""
    try:
        _rapidocr_rec_config(1)
    except ImportError as err:
        return f'ppocrv4: rapidocr-onnxruntime is not installed ({err}); pip install rapidocr-onnxruntime==1.4.4'
    except FileNotFoundError as err:
        return str(err)
    return None


def build_recognizer(name: str, **opts):
    """'transocr' (opts: checkpoint, device, preprocess, max_steps, batch_size) or 'ppocrv4' (num_threads)."""
    if name == 'transocr':
        return TransOCRRecognizer(**opts)
    if name == 'ppocrv4':
        return PPOCRv4Recognizer(**opts)
    raise ValueError(f'unknown recognizer {name!r}; expected one of {RECOGNIZERS}')
