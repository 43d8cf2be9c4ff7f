"""Text-line detection in photos: PaddleOCR's PP-OCRv4 detector (DB) as shipped inside the rapidocr-onnxruntime
1.4.4 wheel (offline; the recognizer's package, ``tola_plugin.evaluation.recognizers``), with rapidocr's default
settings (shorter side scaled to at least 736, box threshold 0.5, unclip ratio 1.6).

``PPOCRv4Detector()(image_bgr)`` -> quadrilaterals (N, 4, 2) float32 in pixel coordinates, each ordered
top-left, top-right, bottom-right, bottom-left, sorted in reading order (top to bottom, then left to right).
"""
import os
from typing import Optional

import numpy as np

from tola_plugin.evaluation.recognizers import rapidocr_model_config

SAME_ROW = 10  # pixels: boxes whose tops differ by less are one row (rapidocr's reading-order rule)


def reading_order(quads: np.ndarray) -> np.ndarray:
    """Sort quadrilaterals top to bottom, and left to right within a row (tops within SAME_ROW pixels)."""
    if len(quads) == 0:
        return quads
    order = sorted(range(len(quads)), key=lambda i: (quads[i][0][1], quads[i][0][0]))
    rows = []
    for i in order:  # greedy rows: a box joins the current row when its top is close to the row's first box
        if rows and abs(quads[i][0][1] - quads[rows[-1][0]][0][1]) < SAME_ROW:
            rows[-1].append(i)
        else:
            rows.append([i])
    return np.stack([quads[i] for row in rows for i in sorted(row, key=lambda j: quads[j][0][0])])


class PPOCRv4Detector:
    """PP-OCRv4 Chinese mobile text detector (ONNX inside the rapidocr-onnxruntime 1.4.4 wheel)."""

    MODEL_FILE = 'ch_PP-OCRv4_det_infer.onnx'

    def __init__(self, num_threads: int = -1, box_thresh: Optional[float] = None):
        # onnxruntime >= 1.30 starts a telemetry thread at import unless this is set first.
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
        from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
        config = rapidocr_model_config('Det', num_threads)
        if os.path.basename(config['model_path']) != self.MODEL_FILE:
            raise ValueError(f'rapidocr config names {config["model_path"]!r}, expected {self.MODEL_FILE}; '
                             f'install rapidocr-onnxruntime==1.4.4')
        if box_thresh is not None:
            config['box_thresh'] = float(box_thresh)
        self.model_path = config['model_path']
        self.engine = TextDetector(config)

    def __call__(self, image_bgr: np.ndarray) -> np.ndarray:
        if not isinstance(image_bgr, np.ndarray) or image_bgr.dtype != np.uint8 or image_bgr.ndim != 3 \
                or image_bgr.shape[2] != 3:
            raise ValueError(f'detector input: expected an HxWx3 uint8 BGR array, got '
                             f'{getattr(image_bgr, "dtype", type(image_bgr))} {getattr(image_bgr, "shape", "")}')
        quads, _ = self.engine(image_bgr)
        if quads is None or len(quads) == 0:
            return np.zeros((0, 4, 2), np.float32)
        return reading_order(np.asarray(quads, np.float32).reshape(-1, 4, 2))
