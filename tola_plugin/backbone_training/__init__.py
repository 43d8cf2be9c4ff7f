"""Training the small demo backbone (tools/train_demo_backbone.py; docs/demo_backbone.md).

``pool``: rendered + degraded lines generated once into .npy files; ``stages``: the VAE, TransOCR and IDM/MoM
training stages; ``latents``: the VAE latents and TransOCR priors the IDM stage reads.
"""
