"""The demo model's weights: a small DiffTSR-shaped backbone trained here on CPU and its TOLA adaptation, shipped in
``backbone/`` (package data; located by ``tola_plugin.checkpoints.demo_backbone``, docs/demo_backbone.md). The code
that trained them and ``make demo``'s report are the lab's (``tola_plugin.lab.demo``)."""
