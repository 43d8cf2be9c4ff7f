"""The paper's evaluation protocol (Evaluation Protocol, supplementary Metric Implementations, Tables S9-S13).

Modules (imported lazily by the tools; none of them downloads anything):

- ``weights``: where each pretrained metric backbone must be on disk; checks before construction.
- ``image_metrics``: PSNR/SSIM on luminance (no border crop), LPIPS-AlexNet, DISTS (per image) and FID
  (once over two directories), all through pyiqa.
- ``recognizers``: TransOCR and PP-OCRv4 (rapidocr-onnxruntime) behind one ``recognize`` interface.
- ``text_metrics``: normalization, ACC (exact match), NED, character edit operations.
- ``statistics``: paired bootstrap intervals and the exact McNemar test.
- ``diagnostics``: confidence bins, text categories, edit totals, prior-correctness strata.
- ``records``: labels manifests, exact filename matching, per-image CSVs and summaries.
- ``plots``: quality-latency scatter, recognition diagnostics, comparison grids.
"""
