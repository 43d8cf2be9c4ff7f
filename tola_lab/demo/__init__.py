"""The demo model's lab (docs/demo_backbone.md): how the small DiffTSR-shaped backbone shipped in
``tola_plugin/assets/demo/backbone/`` was trained, and what ``make demo`` reports about it:

- ``training``: the backbone's training run (tools/train_demo_backbone.py is its command line), with ``pool``
  (rendered + degraded lines generated once into .npy files), ``training_stages`` (the VAE, TransOCR and IDM/MoM
  stages), ``latents`` (the VAE latents and TransOCR priors the IDM stage reads) and ``scores`` (held-out scores);
- ``report``: ``make demo``'s report (tools/demo_report.py): LR | TOLA | HR, metrics.json, the grid;
- ``one_step_error``: where a one-step restoration's error comes from (tools/one_step_error.py);
- ``restore_figure``: the figure of docs/restore.md, lines of any aspect and a photo restored
  (tools/plot_restore_figure.py).

It uses the evaluation protocol (``tola_plugin.commands.evaluation``) and everything below.
"""
