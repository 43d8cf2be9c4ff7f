"""What the measuring tools measure (the lab: imported by ``tools/`` and the GPU check only):

- ``inference_benchmark`` (and the modules it is split into: ``inference_inputs``, ``stage_timing``,
  ``machine_ceiling``, ``stage_bounds``, ``peak_memory``, ``precision_quality``, ``training_timing``,
  ``inference_report``): every
  inference route and precision side by side (tools/benchmark_inference.py, docs/inference.md "The benchmark").
- ``efficiency_benchmark``, ``complexity``, ``benchmarking``: parameters, MACs and latency of TOLA, DiffTSR and ESRGAN
  (tools/benchmark_efficiency.py); MAC and parameter counting; building and timing the benchmarked networks.
- ``startup_benchmark``: interpreter start-up with the plugin installed (tools/benchmark_startup.py).
- ``degradation_benchmark``: the degradation chains' CPU time (tools/benchmark_degradation.py).
"""
