"""The tools' bodies (``tola_cli/<name>.py`` parses, then calls one): ``data_preparation``, ``evaluation`` (the
paper's protocol), ``weight_files`` (export, conversion), ``estimate_memory``. Nothing below imports them."""
