"""Third-party pretrained files the metrics and losses read (ImageNet backbones, pyiqa's calibration files): their
names, folders and sources, checked before use; nothing is ever downloaded (``metric_weights``)."""
