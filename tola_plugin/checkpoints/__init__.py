"""Weight files: the official DiffTSR and TransOCR checkpoints, the strict state-dict check, TOLA adaptation
checkpoints and merged TOLA files (docs/architecture.md).

File formats only: these modules read and write weight files (state dicts and configs) and import no arch;
``tola_plugin.archs.backbone_builder`` builds the modules and fills them. Modules (imported where used):

- ``strict``: ``load_state_dict_strict`` (every key, shape and tensor checked, then assigned).
- ``difftsr``: ``DiffTSR.ckpt`` (or our converted safetensors) -> IDM, VAE, MoM state dicts (docs/backbone.md).
- ``transocr``: ``transocr.pth`` -> TransOCR state dict (docs/transocr.md).
- ``tola``: TOLA adaptation checkpoints (LoRA + LRC with their settings), merged TOLA files, and building a
  trained TOLANet from an option file (docs/tola.md).

Reading weights safely and writing them atomically is ``tola_plugin.utils.checkpoint_io`` (used by every
saver of the package, the BasicSR patches included).
"""
