"""The paper's evaluation protocol (Evaluation Protocol, supplementary Metric Implementations, Tables S9-S13): nothing
below imports it (the demo report does, from above). Modules (none of them downloads anything):

- ``runner``: restored folders against references and labels: per-image metrics (``tola_plugin.metrics``) and
  recognizers (``tola_plugin.ocr``), FID, per-image CSVs and summaries (tola-evaluate).
- ``records``: labels manifests, exact filename matching, per-image CSVs and summaries.
- ``statistics``: paired bootstrap intervals and the exact McNemar test.
- ``diagnostics``: confidence bins, text categories, edit totals, prior-correctness strata; two evaluation folders
  diagnosed into diagnostics.json / .md (tola-diagnose).
- ``plots``: quality-latency scatter, recognition diagnostics, comparison grids, also from the tools' files
  (tola-plot-results).

The measurements of the tools (benchmarks, MACs) are the lab's (``tola_lab.benchmarks``), as are the ablations'
option files (``tola_lab.ablations``)."""
