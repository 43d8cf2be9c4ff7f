"""The text recognizers and the text detector (docs/evaluation.md, "Recognizers"). Every image going in is RGB
uint8 (H, W, 3), as in the inference pipeline; PaddleOCR's models read BGR, and ``ppocr`` converts at that boundary.

- ``recognition``: the interface (``Recognition(text, confidence)``, the input check);
- ``transocr_recognizer``: TransOCR (our module, the paper's primary recognizer);
- ``ppocr``: PP-OCRv4 recognition, text-line detection and the text-direction classifier (rapidocr-onnxruntime);
- ``recognizers``: the recognizers by name (``build_recognizer``).

Nothing here downloads anything: the PP-OCR models ship inside the rapidocr-onnxruntime wheel.
"""
