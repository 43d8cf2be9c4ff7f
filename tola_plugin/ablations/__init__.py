"""The option files of the paper's ablation rows (``option_files``; tools/make_tola_ablations.py writes and checks
``options/ablations/``)."""
