"""Image statistics and admission rules for real text images (paper supp. "RT50 Construction",
"RealCE-200 Construction"), and the PNG/TSV writers of their outputs, shared by tools/screen_rt50.py and
tools/build_realce200.py.

Statistics are computed on the 8-bit gray image after "canonical resizing" to the 512x128 canvas
(PIL bicubic, as the datasets do): mean and population std of gray levels, variance of the 3x3
``cv2.Laplacian`` (CV_64F), edge density = fraction of ``cv2.Canny`` edge pixels, Shannon entropy in bits
of the 256-bin histogram; plus a 64-bit dHash (9x8 area-resized gray, left < right comparisons).
All range checks are inclusive.
"""
import hashlib
import re
from typing import Dict, List, Optional

import cv2
import numpy as np

from tola_plugin.data.text_line_source import CANVAS_H, CANVAS_W, canvas_rgb8

# Paper, supplementary "RT50 Construction".
RT50_LABEL_LENGTHS = {'chinese': (2, 8), 'english': (3, 12), 'numeric': (2, 6)}
RT50_THRESHOLDS = {
    'min_width': 24,
    'min_height': 8,
    'aspect': (2.0, 10.0),
    'gray_mean': (20.0, 235.0),
    'gray_std': (10.0, 80.0),
    'laplacian_var': (2.0, 1200.0),
    'edge_density': (0.01, 0.65),
    'min_entropy': 3.0,
    'dhash_distance': 7,  # a candidate within this Hamming distance of an admitted one is a near duplicate
}
CANNY_THRESHOLDS = (100, 200)  # not stated in the paper; OpenCV tutorial values

_CJK = re.compile(r'^[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+$')
_LATIN = re.compile(r'^[A-Za-z]+$')
_DIGITS = re.compile(r'^[0-9]+$')


def canvas_gray(img_bgr: np.ndarray, width: int = CANVAS_W, height: int = CANVAS_H) -> np.ndarray:
    """BGR uint8 -> gray uint8 (height,width) after PIL-bicubic resizing of the RGB image."""
    return cv2.cvtColor(canvas_rgb8(img_bgr, width, height), cv2.COLOR_RGB2GRAY)


def gray_entropy(gray: np.ndarray) -> float:
    """Shannon entropy (bits) of the 256-bin histogram of a uint8 image."""
    hist = np.bincount(gray.ravel(), minlength=256).astype(np.float64)
    p = hist[hist > 0] / hist.sum()
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0: no '-0.0' for a flat image


def dhash(gray: np.ndarray, hash_size: int = 8) -> int:
    """Difference hash: ``hash_size**2`` bits, 1 where a pixel is brighter than its left neighbour."""
    small = cv2.resize(gray, (hash_size + 1, hash_size), interpolation=cv2.INTER_AREA).astype(np.int16)
    bits = (small[:, 1:] > small[:, :-1]).ravel()
    return int(sum(1 << i for i, b in enumerate(bits) if b))


def hamming(a: int, b: int) -> int:
    return bin(a ^ b).count('1')


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def _cell(value) -> str:
    if isinstance(value, float):
        return f'{value:.6f}'
    if isinstance(value, np.integer):
        return str(int(value))
    return str(value)


def write_tsv(path: str, header: List[str], rows: List[dict]) -> None:
    """UTF-8 TSV with ``header``; one line per row dict (absent keys empty, floats with 6 decimals)."""
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\t'.join(header) + '\n')
        for row in rows:
            f.write('\t'.join(_cell(row.get(k, '')) for k in header) + '\n')


def image_stats(img_bgr: np.ndarray, canny=CANNY_THRESHOLDS) -> Dict[str, float]:
    """Geometry of the original image and quality statistics of its canonical 512x128 gray version."""
    h, w = img_bgr.shape[:2]
    gray = canvas_gray(img_bgr)
    return {
        'width': w,
        'height': h,
        'aspect': w / h,
        'gray_mean': float(gray.mean()),
        'gray_std': float(gray.std()),
        'laplacian_var': float(cv2.Laplacian(gray, cv2.CV_64F).var()),
        'edge_density': float((cv2.Canny(gray, canny[0], canny[1]) > 0).mean()),
        'entropy': gray_entropy(gray),
        'dhash': dhash(gray),
    }


def _outside(value: float, bounds) -> bool:
    lo, hi = bounds
    return not lo <= value <= hi


def failed_quality_rules(stats: Dict[str, float], thresholds: Optional[dict] = None) -> List[str]:
    """Names of the geometry/quality rules ``stats`` violates (empty: admissible). Bounds are inclusive."""
    t = dict(RT50_THRESHOLDS, **(thresholds or {}))
    failed = []
    if stats['width'] < t['min_width'] or stats['height'] < t['min_height']:
        failed.append('size')
    for name in ('aspect', 'gray_mean', 'gray_std', 'laplacian_var', 'edge_density'):
        if _outside(stats[name], t[name]):
            failed.append(name)
    if stats['entropy'] < t['min_entropy']:
        failed.append('entropy')
    return failed


def label_category(label: str, lengths: Optional[dict] = None) -> Optional[str]:
    """'chinese' (CJK ideographs), 'english' (Latin letters) or 'numeric' (digits) when ``label`` is
    entirely of that script with an admissible length; otherwise None."""
    lengths = lengths or RT50_LABEL_LENGTHS
    for category, pattern in (('chinese', _CJK), ('english', _LATIN), ('numeric', _DIGITS)):
        if pattern.match(label):
            lo, hi = lengths[category]
            return category if lo <= len(label) <= hi else None
    return None
