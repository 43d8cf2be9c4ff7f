"""PaddleOCR's PP-OCRv4 models as shipped inside the rapidocr-onnxruntime 1.4.4 wheel (offline: no network, the
models are in the wheel; onnxruntime telemetry is disabled before it is imported), run through rapidocr's own engine.
Inputs are RGB, as everywhere in ``tola_plugin.ocr``; PaddleOCR's models read OpenCV's BGR, so each class converts
once, here (``_bgr``).

- ``PPOCRv4Recognizer``: the independent cross-check of the evaluation, the Chinese PP-OCRv4 mobile recognition
  model, recognition only (no detection, no orientation classifier), PaddleOCR 2.7.3's preprocessing (height 48,
  width padded to >= 320, batches of 6). Confidence = rapidocr's mean max-probability of the kept CTC frames.
- ``PPOCRv4Detector``: text lines in photos, the PP-OCRv4 detector (DB) with rapidocr's default settings: the
  photo's longer side reduced to at most 2000 and its shorter side raised to at least 30 pixels, a letterbox for
  single-line strips, shorter side scaled to at least 736 for the network, box threshold 0.5, unclip ratio 1.6,
  boxes mapped back to the photo and sorted in reading order. ``detector(image_rgb)`` -> quadrilaterals (N, 4, 2)
  float32 in pixel coordinates, each ordered top-left, top-right, bottom-right, bottom-left, in reading order (top
  to bottom, then left to right). An image too thin for rapidocr's resizing (longer side over 2000 and shorter side
  under 16 pixels once the longer is brought to 2000: more than ~125:1) is an ``UndetectableShape`` error saying so
  (rapidocr raises ``ResizeImgError``). ``upside_down(strips_rgb)``: PaddleOCR's text-direction classifier
  (``ch_ppocr_mobile_v2.0_cls``, same wheel) on the rectified lines, as PaddleOCR's ``use_angle_cls``.
"""
import os
from typing import List, Optional, Sequence

import numpy as np

from tola_plugin.data.image_io import convert_order
from tola_plugin.ocr.recognition import Recognition, check_rgb_images


def _bgr(images: Sequence[np.ndarray]) -> List[np.ndarray]:
    """RGB -> BGR, the one conversion at PaddleOCR's boundary."""
    return [convert_order(img, 'RGB', 'BGR') for img in images]


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


class PPOCRv4Recognizer:
    """PP-OCRv4 Chinese mobile recognizer (rapidocr-onnxruntime 1.4.4, ONNX inside the wheel), rec only."""

    name = 'ppocrv4'
    MODEL_FILE = 'ch_PP-OCRv4_rec_infer.onnx'

    def __init__(self, num_threads: int = -1, batch_size: int = 6):
        # onnxruntime >= 1.30 starts a telemetry thread at import unless this is set first.
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
        from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer
        config = rapidocr_model_config('Rec', num_threads)
        if os.path.basename(config['model_path']) != self.MODEL_FILE:
            raise ValueError(f'rapidocr config names {config["model_path"]!r}, expected {self.MODEL_FILE}; '
                             f'install rapidocr-onnxruntime==1.4.4')
        config['rec_batch_num'] = batch_size  # PaddleOCR 2.7.3's rec_batch_num is 6 too
        self.model_path = config['model_path']
        self.engine = TextRecognizer(config)

    def __call__(self, images: Sequence[np.ndarray]) -> List[Recognition]:
        """RGB uint8 (H, W, 3) lines -> one Recognition each."""
        check_rgb_images(images)
        if not images:
            return []
        results, _ = self.engine(_bgr(images))
        return [Recognition(str(text), float(conf)) for text, conf in results]


def ppocrv4_unavailable() -> Optional[str]:
    """None when the PP-OCRv4 model can be built offline, else why not (package or model file missing)."""
    try:
        rapidocr_model_config('Rec', 1)
    except ImportError as err:
        return f'ppocrv4: rapidocr-onnxruntime is not installed ({err}); pip install rapidocr-onnxruntime==1.4.4'
    except FileNotFoundError as err:
        return str(err)
    return None


class UndetectableShape(ValueError):
    """An image the detector cannot take at all (too thin); the message is the reason, for the caller's note."""


def _resize_errors():
    """rapidocr's two ``ResizeImgError`` classes (its preprocessing and its detector's own resize)."""
    from rapidocr_onnxruntime.ch_ppocr_det.utils import ResizeImgError as DetResizeError
    from rapidocr_onnxruntime.utils.process_img import ResizeImgError
    return ResizeImgError, DetResizeError


class PPOCRv4Detector:
    """PP-OCRv4 Chinese mobile text detector (ONNX inside the rapidocr-onnxruntime 1.4.4 wheel)."""

    MODEL_FILE = 'ch_PP-OCRv4_det_infer.onnx'

    def __init__(self, num_threads: int = -1):
        # onnxruntime >= 1.30 starts a telemetry thread at import unless this is set first.
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
        from rapidocr_onnxruntime import RapidOCR
        config = rapidocr_model_config('Det', num_threads)  # the model file must be in the wheel
        if os.path.basename(config['model_path']) != self.MODEL_FILE:
            raise ValueError(f'rapidocr config names {config["model_path"]!r}, expected {self.MODEL_FILE}; '
                             f'install rapidocr-onnxruntime==1.4.4')
        self.model_path = config['model_path']
        self.engine = RapidOCR(intra_op_num_threads=num_threads, inter_op_num_threads=num_threads)

    def __call__(self, image_rgb: np.ndarray) -> np.ndarray:
        """RGB uint8 (H, W, 3) photo -> its text lines' quadrilaterals (module docstring)."""
        check_rgb_images([image_rgb], 'detector input')
        try:
            quads, _ = self.engine(_bgr([image_rgb])[0], use_det=True, use_cls=False, use_rec=False)
        except _resize_errors():
            height, width = image_rgb.shape[:2]
            aspect = max(height, width) / min(height, width)
            raise UndetectableShape(f'PP-OCRv4\'s detector cannot take a {width}x{height} image: too thin (aspect '
                                    f'{aspect:.0f}:1; when the longer side is over 2000 pixels it is scaled to 2000, '
                                    f'and the shorter side must keep at least 16)') from None
        if not quads:
            return np.zeros((0, 4, 2), np.float32)
        return np.asarray(quads, np.float32).reshape(-1, 4, 2)

    def upside_down(self, strips_rgb: Sequence[np.ndarray]) -> List[bool]:
        """For each rectified line (uint8 RGB), whether it reads upside down (rotated 180 degrees), with more than
        rapidocr's threshold of confidence (0.9)."""
        if not strips_rgb:
            return []
        check_rgb_images(strips_rgb, 'direction classifier input')
        _, results, _ = self.engine.text_cls(_bgr(strips_rgb))
        return [('180' in label and score > self.engine.text_cls.cls_thresh) for label, score in results]
