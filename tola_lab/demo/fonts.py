"""Font subsets of the demo's characters, for a machine without CJK fonts (a stock CUDA PyTorch image): each
Chinese font fontconfig lists here (the faces ``TextLineRenderer`` draws from), cut down with fontTools' subsetter to
the letters, digits and the 100 Chinese characters the demo renders (a few hundred KB in all), so the GPU renders
the same kind of lines as this machine. Written by ``make gpu-carry`` into the carry's ``fonts/``."""
import logging
import os
from typing import List, Optional, Sequence

from tola_plugin.data.text_render import DIGITS, LATIN, demo_chinese, system_cjk_fonts


def demo_characters() -> str:
    """Every character a demo line can hold (``--chinese-chars demo``), and a space."""
    return LATIN + DIGITS + demo_chinese() + ' '


def write_font_subsets(out: str, fonts: Optional[Sequence[str]] = None) -> List[str]:
    """Subset each font file (face 0 of a collection) of ``fonts`` (default: fontconfig's Chinese fonts) to
    ``demo_characters()``, as ``out/<name>-demo.ttf``; -> the written paths. ValueError when a font lacks one."""
    from fontTools import subset
    from fontTools.ttLib import TTFont
    logging.getLogger('fontTools.subset').setLevel(logging.ERROR)  # "FFTM NOT subset": tables the renderer never reads
    os.makedirs(out, exist_ok=True)
    chars = demo_characters()
    written = []
    for path in sorted(set(fonts or system_cjk_fonts())):
        font = TTFont(path, fontNumber=0)
        missing = [c for c in chars if ord(c) not in font.getBestCmap()]
        if missing:
            raise ValueError(f'{path} lacks {"".join(missing)!r} of the demo\'s characters')
        options = subset.Options()
        options.layout_features = ['*']
        options.name_IDs = ['*']
        options.notdef_outline = True
        subsetter = subset.Subsetter(options)
        subsetter.populate(text=chars)
        subsetter.subset(font)
        target = os.path.join(out, os.path.splitext(os.path.basename(path))[0] + '-demo.ttf')
        font.flavor = None
        font.save(target)
        written.append(target)
    return written
