"""Six real low-resolution text lines from DiffTSR's test set (Apache-2.0; README.md in this folder). The files are
read by ``tola_plugin.data.sample_images``; ``samples_dir``, ``sample_paths`` and ``sample_labels`` (a transcription
read from the image, not official ground truth) are its functions bound to this package."""
import functools

from tola_plugin.data import sample_images

samples_dir = functools.partial(sample_images.sample_folder, __name__)
sample_paths = functools.partial(sample_images.sample_paths, __name__)
sample_labels = functools.partial(sample_images.sample_labels, __name__)
