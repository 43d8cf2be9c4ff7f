"""Text-line detection in photos: PaddleOCR's PP-OCRv4 detector (DB) as shipped inside the rapidocr-onnxruntime
1.4.4 wheel (offline; the package of ``tola_plugin.ocr.recognizers``), run through rapidocr's own engine
with its default settings: the photo's longer side reduced to at most 2000 and its shorter side raised to at least
30 pixels, a letterbox for single-line strips, shorter side scaled to at least 736 for the network, box threshold
0.5, unclip ratio 1.6, boxes mapped back to the photo and sorted in reading order.

``PPOCRv4Detector()(image_bgr)`` -> quadrilaterals (N, 4, 2) float32 in pixel coordinates of ``image_bgr``, each
ordered top-left, top-right, bottom-right, bottom-left, in reading order (top to bottom, then left to right). An
image too thin for rapidocr's resizing (longer side over 2000 and shorter side under 16 pixels once the longer is
brought to 2000: more than ~125:1) is an ``UndetectableShape`` error saying so (rapidocr raises ``ResizeImgError``).
``upside_down(strips)``: PaddleOCR's text-direction classifier (``ch_ppocr_mobile_v2.0_cls``, same wheel) on the
rectified lines, as PaddleOCR's ``use_angle_cls``.
"""
import os
from typing import List, Sequence

import numpy as np

from tola_plugin.ocr.recognizers import rapidocr_model_config


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

    def __call__(self, image_bgr: np.ndarray) -> np.ndarray:
        if not isinstance(image_bgr, np.ndarray) or image_bgr.dtype != np.uint8 or image_bgr.ndim != 3 \
                or image_bgr.shape[2] != 3:
            raise ValueError(f'detector input: expected an HxWx3 uint8 BGR array, got '
                             f'{getattr(image_bgr, "dtype", type(image_bgr))} {getattr(image_bgr, "shape", "")}')
        try:
            quads, _ = self.engine(image_bgr, use_det=True, use_cls=False, use_rec=False)
        except _resize_errors():
            height, width = image_bgr.shape[:2]
            aspect = max(height, width) / min(height, width)
            raise UndetectableShape(f'PP-OCRv4\'s detector cannot take a {width}x{height} image: too thin (aspect '
                                    f'{aspect:.0f}:1; when the longer side is over 2000 pixels it is scaled to 2000, '
                                    f'and the shorter side must keep at least 16)') from None
        if not quads:
            return np.zeros((0, 4, 2), np.float32)
        return np.asarray(quads, np.float32).reshape(-1, 4, 2)

    def upside_down(self, strips_bgr: Sequence[np.ndarray]) -> List[bool]:
        """For each rectified line (uint8 BGR), whether it reads upside down (rotated 180 degrees), with more than
        rapidocr's threshold of confidence (0.9)."""
        if not strips_bgr:
            return []
        _, results, _ = self.engine.text_cls(list(strips_bgr))
        return [('180' in label and score > self.engine.text_cls.cls_thresh) for label, score in results]
