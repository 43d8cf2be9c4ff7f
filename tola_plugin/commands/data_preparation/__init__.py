"""The data-preparation tools' bodies (docs/data.md): rendered lines and photos (``rendered_lines``, ``photo_render``,
``restore_samples``), dataset splits and degraded test sets (``dataset_split``, ``degraded_test_set``), RealCE-200 and
RT50 (``realce200``, ``rt50_screening``; their screening statistics: ``image_checks``). The datasets: ``data/``."""
