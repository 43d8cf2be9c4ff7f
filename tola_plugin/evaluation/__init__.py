"""The paper's evaluation protocol (Evaluation Protocol, supplementary Metric Implementations, Tables S9-S13), and
the measurements of the tools (benchmarks, MACs, memory). A consumer of the rest of the package, like ``tools/``:
nothing below imports it (the demo report does, from above).

Modules (none of them downloads anything):

- ``runner``: restored folders against references and labels: per-image metrics (``tola_plugin.metrics``) and
  recognizers (``tola_plugin.ocr``), FID, per-image CSVs and summaries (tools/evaluate.py).
- ``records``: labels manifests, exact filename matching, per-image CSVs and summaries.
- ``statistics``: paired bootstrap intervals and the exact McNemar test.
- ``diagnostics``: confidence bins, text categories, edit totals, prior-correctness strata; two evaluation folders
  diagnosed into diagnostics.json / .md (tools/diagnose.py).
- ``plots``: quality-latency scatter, recognition diagnostics, comparison grids, also from the tools' files
  (tools/plot_results.py).
- ``complexity``, ``benchmarking``, ``inference_benchmark``, ``memory_estimate``: MACs and parameters, timing,
  the inference benchmark, the meta-device training-memory estimate (the benchmark tools and
  tools/estimate_memory.py).
- ``efficiency_benchmark``, ``startup_benchmark``, ``degradation_benchmark``: parameters, MACs and latency of TOLA
  and DiffTSR, interpreter start-up with the plugin installed, the degradation chains' CPU time (the bodies of
  tools/benchmark_efficiency.py, tools/benchmark_startup.py, tools/benchmark_degradation.py).
- ``ablation_options``: the option files of the paper's ablations (tools/make_tola_ablations.py).
"""
