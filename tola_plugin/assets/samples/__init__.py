"""Six real low-resolution text lines of DiffTSR's test set (Apache-2.0; README.md here): ``samples_dir``,
``sample_paths``, ``sample_labels`` (read from the images, not ground truth) are ``data.sample_images``' bound to it."""
import functools

from tola_plugin.data import sample_images

samples_dir = functools.partial(sample_images.sample_folder, __name__)
sample_paths = functools.partial(sample_images.sample_paths, __name__)
sample_labels = functools.partial(sample_images.sample_labels, __name__)
