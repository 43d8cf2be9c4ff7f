"""The maintainers' lab: what measures, checks and reproduces the package, its own package of the same wheel
(docs/architecture.md, "The package plan"). Imported by ``tools/``, the GPU check's own processes and the tests only;
what a user imports (``tola_plugin``) and the command lines (``tola_cli``) never import it (``make lint``: LAY003).

- ``benchmarks``: what the measuring tools measure (tools/benchmark_*.py, tools/measure_photo_lines.py);
- ``gpu_check``: the GPU check and its bundle (tools/gpu_check.py, tools/gpu_bundle.py, docs/training_gpus.md);
- ``demo``: the demo backbone's training and ``make demo``'s report (tools/train_demo_backbone.py,
  tools/demo_report.py, tools/one_step_error.py, tools/plot_restore_figure.py); the weights it made ship in
  ``tola_plugin/assets/demo/backbone/``;
- ``browser``: headless Chromium driving the web demo (the browser test; docs/web.md's screenshot: ``screenshot``);
- ``ablations``: the option files of the paper's ablation rows (tools/make_tola_ablations.py).
"""
