"""Render single-line text images (our only data here): Chinese, English, digits and mixed strings.

Every sample draws from its own generator seeded by (seed, index), so a set is byte-identical for a
seed and does not depend on how many samples are rendered. Glyph coverage is checked against each
font's cmap before drawing: a string no available font covers is an error, never a tofu box.
Defaults (ink 55-85 % of the height, luma contrast > 90, solid/gradient/texture backgrounds, mild HR noise) keep
the lines readable by real OCR (docs/data.md, "Tools": rendering defaults and what PP-OCRv4 reads).
"""
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from fontTools.ttLib import TTCollection, TTFont
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from tola_plugin.data.image_io import to_uint8
from tola_plugin.text.alphabets import idm_alphabet, transocr_classes

# Lengths of the paper's real-text protocol (supplementary, RT50): 2-8 Chinese characters,
# 3-12 English letters, 2-6 digits; mixed lines combine a Chinese word with a number or a word.
LENGTHS = {'chinese': (2, 8), 'english': (3, 12), 'digits': (2, 6)}
CATEGORIES = ('chinese', 'english', 'digits', 'mixed')
DEFAULT_CATEGORY_PROBS = (0.4, 0.2, 0.2, 0.2)
# l/I/O look like 1/1/0 in many fonts: leaving them out keeps the ground truth unambiguous.
LATIN = ''.join(c for c in 'abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ')
DIGITS = '0123456789'


@dataclass(frozen=True)
class FontFace:
    """One face of a font file (``index`` selects a face inside a .ttc collection)."""
    path: str
    index: int
    name: str
    coverage: FrozenSet[int]

    def covers(self, text: str) -> bool:
        return all(ord(ch) in self.coverage for ch in text)


@lru_cache(maxsize=1)
def common_chinese() -> str:
    """GB2312 level-1 characters (the 3,755 most common) that both the IDM and TransOCR alphabets have.

    Derived from the codec rather than typed in: rows 0xB0-0xD7 of GB2312 are level 1.
    """
    idm, ocr = set(idm_alphabet()), set(transocr_classes())
    chars = []
    for hi in range(0xB0, 0xD8):
        for lo in range(0xA1, 0xFF):
            try:
                ch = bytes([hi, lo]).decode('gb2312')
            except UnicodeDecodeError:
                continue
            if ch in idm and ch in ocr:
                chars.append(ch)
    return ''.join(chars)


def load_faces(paths: Sequence[str]) -> List[FontFace]:
    """Font faces of the given files (every face of a .ttc), with their character coverage."""
    faces = []
    for path in paths:
        try:
            fonts = TTCollection(path).fonts if path.lower().endswith(('.ttc', '.otc')) else [TTFont(path)]
        except Exception as err:
            raise ValueError(f'font file {path!r} could not be read: {err}') from err
        for index, font in enumerate(fonts):
            cmap = font.getBestCmap() or {}
            name = font['name'].getDebugName(4) or path
            faces.append(FontFace(path, index, name, frozenset(cmap)))
    return faces


def system_cjk_fonts() -> List[str]:
    """Font files fontconfig lists for Chinese (Debian: fonts-wqy-microhei, fonts-noto-cjk, ...)."""
    try:
        out = subprocess.run(['fc-list', ':lang=zh', 'file'], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted({line.split(':')[0].strip() for line in out.splitlines() if line.strip()})


@lru_cache(maxsize=1)
def demo_chinese() -> str:
    """The demo's reduced Chinese pool: the 100 most frequent characters of the CTR benchmark's scene and web
    test labels (FudanVI, MIT) among ``common_chinese()``, most frequent first (package file
    ``assets/vocab/demo_chinese.txt``; docs/data.md says how it was counted)."""
    text = resources.files('tola_plugin.assets.vocab').joinpath('demo_chinese.txt').read_text(encoding='utf-8').strip()
    stray = sorted(set(text) - set(common_chinese()))
    if stray or len(set(text)) != len(text):
        raise ValueError(f'assets/vocab/demo_chinese.txt must be distinct characters of common_chinese(); bad: {stray}')
    return text


#: Named Chinese pools of ``TextLineRenderer(chinese_chars=...)`` and ``tools/render_text.py --chinese-chars``.
CHINESE_POOLS = {'common': common_chinese, 'demo': demo_chinese}


def chinese_pool(spec: Optional[str]) -> str:
    """Chinese characters to draw from: None or 'common' (GB2312 level 1), 'demo' (100 frequent characters),
    or a UTF-8 file of characters (whitespace ignored; each must be in ``common_chinese()``)."""
    if spec is None or spec in CHINESE_POOLS:
        return CHINESE_POOLS[spec or 'common']()
    if not os.path.isfile(spec):
        raise FileNotFoundError(f'Chinese pool {spec!r}: not one of {sorted(CHINESE_POOLS)} and not a file')
    with open(spec, encoding='utf-8') as f:
        chars = ''.join(dict.fromkeys(''.join(f.read().split())))
    stray = ''.join(sorted(set(chars) - set(common_chinese())))
    if not chars or stray:
        raise ValueError(f'Chinese pool file {spec!r} must hold characters present in both alphabets (GB2312 '
                         f'level 1); not usable: {stray!r}' if stray else f'Chinese pool file {spec!r} is empty')
    return chars


def random_text(rng: np.random.Generator, category: str, pool: Optional[str] = None) -> str:
    """A random string of ``category`` with the paper's lengths; Chinese characters come from ``pool``
    (default ``common_chinese()``)."""
    pool = pool or common_chinese()
    if category == 'chinese':
        return ''.join(rng.choice(list(pool), size=rng.integers(*LENGTHS['chinese'], endpoint=True)))
    if category == 'english':
        return ''.join(rng.choice(list(LATIN), size=rng.integers(*LENGTHS['english'], endpoint=True)))
    if category == 'digits':
        return ''.join(rng.choice(list(DIGITS), size=rng.integers(*LENGTHS['digits'], endpoint=True)))
    if category == 'mixed':
        zh = ''.join(rng.choice(list(pool), size=rng.integers(2, 5, endpoint=True)))
        other = random_text(rng, 'digits' if rng.random() < 0.5 else 'english', pool)
        return zh + other if rng.random() < 0.5 else other + zh
    raise ValueError(f'unknown text category {category!r}; expected one of {CATEGORIES}')


def _colours(rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Background and ink RGB colours whose luma differs by more than 90."""
    luma = np.array([0.299, 0.587, 0.114])
    while True:
        bg, ink = rng.integers(0, 256, size=3), rng.integers(0, 256, size=3)
        if abs(float(luma @ bg) - float(luma @ ink)) > 90:
            return bg.astype(np.float32), ink.astype(np.float32)


def _background(rng: np.random.Generator, height: int, width: int, colour: np.ndarray) -> np.ndarray:
    """Solid, gradient or low-frequency texture background, float32 (H,W,3) in [0,255]."""
    kind = rng.integers(3)
    base = np.broadcast_to(colour, (height, width, 3)).astype(np.float32)
    if kind == 1:  # horizontal gradient of +-30 luma
        ramp = np.linspace(-1.0, 1.0, width, dtype=np.float32)[None, :, None] * rng.uniform(10, 30)
        base = base + ramp
    elif kind == 2:  # smooth blobs: upsampled coarse noise
        coarse = rng.normal(0, 12, size=(4, 16, 1)).astype(np.float32)
        base = base + cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)[..., None]
    return np.clip(base, 0, 255)


def render_line(text: str, face: FontFace, rng: np.random.Generator, height: int = 128, width: int = 512) -> np.ndarray:
    """Draw ``text`` with ``face`` on a ``height`` x ``width`` canvas; returns uint8 RGB (H,W,3)."""
    if not face.covers(text):
        missing = ''.join(sorted({ch for ch in text if ord(ch) not in face.coverage}))
        raise ValueError(f'font {face.path} (face {face.index}) has no glyph for {missing!r} in {text!r}')
    # Draw large on a transparent mask, then scale the ink box to the target size.
    font = ImageFont.truetype(face.path, 96, index=face.index)
    spacing = int(rng.integers(0, 12))
    advances = [font.getlength(ch) for ch in text]
    mask = Image.new('L', (int(sum(advances) + spacing * len(text) + 96), 192), 0)
    draw = ImageDraw.Draw(mask)
    x = 48.0
    for ch, adv in zip(text, advances):
        draw.text((x, 32), ch, font=font, fill=255)
        x += adv + spacing
    if rng.random() < 0.3:
        mask = mask.rotate(float(rng.uniform(-3, 3)), resample=Image.BICUBIC, expand=True)
    box = mask.getbbox()
    if box is None:
        raise ValueError(f'font {face.path} (face {face.index}) drew no ink for {text!r}')
    mask = mask.crop(box)
    ink_h = rng.uniform(0.55, 0.85) * height
    scale = min(ink_h / mask.height, 0.92 * width / mask.width, 0.94 * height / mask.height)
    new_w, new_h = max(1, round(mask.width * scale)), max(1, round(mask.height * scale))
    mask = mask.resize((new_w, new_h), Image.LANCZOS)
    if rng.random() < 0.15:
        mask = mask.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.3, 0.8))))
    left = int(rng.integers(0, width - new_w + 1))
    top = int(rng.integers(0, height - new_h + 1))
    alpha = np.zeros((height, width, 1), np.float32)
    alpha[top:top + new_h, left:left + new_w, 0] = np.asarray(mask, np.float32) / 255.0

    bg_colour, ink = _colours(rng)
    canvas = _background(rng, height, width, bg_colour) * (1 - alpha) + ink * alpha
    canvas = canvas + rng.normal(0, rng.uniform(2, 5), size=canvas.shape)  # mild HR sensor noise
    return to_uint8(canvas, peak=255.0)


class TextLineRenderer:
    """Reproducible generator of (RGB uint8 image, transcription) samples.

    Args:
        font_paths: font files to use; default: every Chinese font fontconfig knows.
        seed: base seed; sample ``i`` is a function of (seed, i) only.
        category_probs: probabilities of chinese / english / digits / mixed.
        height, width: canvas size (the paper's 128 x 512).
        chinese_chars: Chinese pool (``chinese_pool``: None/'common', 'demo' or a file of characters).
    """

    def __init__(self, font_paths: Optional[Sequence[str]] = None, seed: int = 0,
                 category_probs: Sequence[float] = DEFAULT_CATEGORY_PROBS, height: int = 128, width: int = 512,
                 chinese_chars: Optional[str] = None):
        paths = list(font_paths) if font_paths else system_cjk_fonts()
        if not paths:
            raise FileNotFoundError('no font given and fontconfig lists no Chinese font; install one '
                                    '(Debian: apt-get install fonts-wqy-microhei) or pass --font PATH')
        self.faces = load_faces(paths)
        probs = np.asarray(category_probs, dtype=np.float64)
        if probs.shape != (len(CATEGORIES), ) or (probs < 0).any() or probs.sum() <= 0:
            raise ValueError(f'category_probs must be {len(CATEGORIES)} non-negative numbers for {CATEGORIES}')
        self.category_probs = probs / probs.sum()
        self.seed, self.height, self.width = seed, height, width
        self.chinese = chinese_pool(chinese_chars)
        self._cache: Dict[Tuple[str, int], FontFace] = {}

    def faces_covering(self, text: str) -> List[FontFace]:
        """The faces that have a glyph for every character of ``text``."""
        return [f for f in self.faces if f.covers(text)]

    def render(self, index: int, text: Optional[str] = None) -> Tuple[np.ndarray, str, str]:
        """Sample ``index``: (RGB uint8 (H,W,3), transcription, category)."""
        rng = np.random.default_rng([self.seed, index])
        category = CATEGORIES[int(rng.choice(len(CATEGORIES), p=self.category_probs))]
        if text is None:
            text = random_text(rng, category, self.chinese)
        faces = self.faces_covering(text)
        if not faces:
            missing = sorted({ch for ch in text if not any(ord(ch) in f.coverage for f in self.faces)})
            raise ValueError(f'no font covers {"".join(missing)!r} of {text!r}; fonts: '
                             f'{sorted({f.path for f in self.faces})}')
        face = faces[int(rng.integers(len(faces)))]
        return render_line(text, face, rng, self.height, self.width), text, category
