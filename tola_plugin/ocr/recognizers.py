"""The recognizers by name, behind one interface (``recognition``: RGB uint8 line images in, one ``Recognition`` per
image out): 'transocr' (``transocr_recognizer.TransOCRRecognizer``, the paper's primary recognizer) and 'ppocrv4'
(``ppocr.PPOCRv4Recognizer``, the independent cross-check)."""
from tola_plugin.ocr.ppocr import PPOCRv4Recognizer
from tola_plugin.ocr.transocr_recognizer import TransOCRRecognizer

RECOGNIZERS = ('transocr', 'ppocrv4')


def build_recognizer(name: str, **opts):
    """'transocr' (opts: checkpoint or model, device, preprocess, max_steps, batch_size) or 'ppocrv4' (num_threads,
    batch_size)."""
    if name == 'transocr':
        return TransOCRRecognizer(**opts)
    if name == 'ppocrv4':
        return PPOCRv4Recognizer(**opts)
    raise ValueError(f'unknown recognizer {name!r}; expected one of {RECOGNIZERS}')
