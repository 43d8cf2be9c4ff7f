"""The demo model: a small DiffTSR-shaped backbone trained here on CPU, shipped in ``backbone/`` (package data; its
files are located by ``tola_plugin.checkpoints.demo_backbone``), and the code around it (docs/demo_backbone.md):

- ``training``: the backbone's training run (tools/train_demo_backbone.py is its command line), with ``pool``
  (rendered + degraded lines generated once into .npy files), ``stages`` (the VAE, TransOCR and IDM/MoM stages),
  ``latents`` (the VAE latents and TransOCR priors the IDM stage reads) and ``scores`` (held-out scores);
- ``report``: ``make demo``'s report (tools/demo_report.py): LR | TOLA | HR, metrics.json, the grid;
- ``one_step_error``: why the demo cannot beat its input (tools/one_step_error.py);
- ``restore_figure``: the figure of docs/restore.md, lines of any aspect and a photo restored
  (tools/plot_restore_figure.py).

The top of the package's layers: it uses the evaluation protocol (``tola_plugin.evaluation``) and everything below.
"""
