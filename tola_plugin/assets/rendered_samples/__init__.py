"""Rendered low-resolution text lines and a photo, examples for tola-infer and the web demo (README.md here):
``samples_dir`` and ``sample_paths`` are ``tola_plugin.data.sample_images``' functions bound to this package."""
import functools

from tola_plugin.data import sample_images

samples_dir = functools.partial(sample_images.sample_folder, __name__)
sample_paths = functools.partial(sample_images.sample_paths, __name__)
