"""The text recognizers and the text detector, behind small interfaces (docs/evaluation.md, "Recognizers"):

- ``recognizers``: TransOCR (our module, the paper's primary recognizer) and PP-OCRv4 recognition
  (rapidocr-onnxruntime) behind one ``recognize`` interface;
- ``ppocr_detection``: PP-OCRv4 text-line detection and PaddleOCR's text-direction classifier, for photos.

Nothing here downloads anything: the PP-OCR models ship inside the rapidocr-onnxruntime wheel.
"""
