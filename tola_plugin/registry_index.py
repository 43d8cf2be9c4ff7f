"""Which module registers each of TOLA's names in BasicSR's registries. ``import tola_plugin`` announces these names
(``basicsr_glue/registry_lookup.py``) and BasicSR imports a module when it first looks one of its names up, so that
``import basicsr`` with the plugin installed imports none of TOLA's networks and their libraries (diffusers, peft,
lpips, ...) until an option file asks for them (docs/architecture.md, "A light plugin").

A module that registers a new name adds it here; ``tests/test_registry_index.py`` imports every module of the
registry folders and checks that this index is exactly what they register.
"""

#: registry name (BasicSR's ``Registry._name``) -> {registered name: module that registers it}
REGISTRY_INDEX = {
    'arch': {
        'DiffTSRNet': 'tola_plugin.archs.difftsr_arch',
        'DiffTSRIDMUNet': 'tola_plugin.archs.idm_unet_arch',
        'LatentResidualCorrection': 'tola_plugin.archs.lrc_arch',
        'DiffTSRMoM': 'tola_plugin.archs.mom_arch',
        'PlainResidualCorrection': 'tola_plugin.archs.plain_residual_arch',
        'TOLANet': 'tola_plugin.archs.tola_arch',
        'TransOCR': 'tola_plugin.archs.transocr_arch',
        'DiffTSRVAE': 'tola_plugin.archs.vae_arch',
    },
    'dataset': {
        'PairedTextDataset': 'tola_plugin.data.paired_text_dataset',
        'TextDegradationDataset': 'tola_plugin.data.text_degradation_dataset',
    },
    'loss': {
        'LPIPSLoss': 'tola_plugin.losses.lpips_loss',
        'OCRCELoss': 'tola_plugin.losses.ocr_ce_loss',
    },
    'metric': {
        'calculate_tola_psnr': 'tola_plugin.metrics.tola_iqa_metric',
        'calculate_tola_ssim': 'tola_plugin.metrics.tola_iqa_metric',
        'calculate_tola_lpips': 'tola_plugin.metrics.tola_iqa_metric',
        'calculate_tola_dists': 'tola_plugin.metrics.tola_iqa_metric',
    },
    'model': {
        'DiffTSRModel': 'tola_plugin.models.difftsr_model',
        'TextSRModel': 'tola_plugin.models.text_sr_model',
        'TextSwinIRModel': 'tola_plugin.models.text_sr_model',
        'TextESRGANModel': 'tola_plugin.models.text_sr_model',
        'TOLAModel': 'tola_plugin.models.tola_model',
    },
}
