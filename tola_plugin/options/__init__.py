"""Option files, in one place (docs/reliability.md, "Option files: one safe reader, strict in every block"): the one
safe, bounded YAML reader and the command line's ``--force_yml`` entries (``reader``), the strict check of every
block (``checks``) with the models' option schema (``schema``) and the ``dist_params`` block (``dist_params``), and
the short-run preset (``short_run``). Used by BasicSR's launchers through ``basicsr_glue``, by the networks' loaders
and by the tools."""
