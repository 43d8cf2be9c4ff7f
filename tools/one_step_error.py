#!/usr/bin/env python
r"""Where a one-step restoration's error comes from: the IDM's ε error amplified ~102x at t = 999, next to the
error of the LR latent itself, what the LRC leaves of it, and the VAE's ceilings (docs/demo_backbone.md,
"Why the demo cannot beat its input").

    python tools/one_step_error.py -opt options/demo/test_TOLA_demo.yml              # the demo's TOLA model
    python tools/one_step_error.py -opt options/demo/test_TOLA_demo.yml --frozen     # the backbone alone

Runs on the option file's test dataset (a TextDegradationDataset with a fixed seed), with the adaptation
checkpoint of path.pretrain_network_g (or --checkpoint); --frozen drops LoRA and LRC (the frozen one-step
route). Prints one line per quantity and writes them to --out (JSON) when given.
"""
import argparse
import json

from tola_plugin.utils.cli_errors import run_tool

DESCRIPTIONS = {
    'eps_l1': "IDM noise error |eps_hat - eps|",
    'amplification': 'its factor in z0: sqrt(1 - abar) / sqrt(abar)',
    'z0_l1': 'one-step z0 error |z0 - s z_HR|',
    'z0_between_draws_l1': 'z0 change between two noise draws',
    'z_lr_l1': 'LR latent error |s z_LR - s z_HR|',
    'z0_corr_l1': 'after the LRC |z0corr - s z_HR|',
    'psnr_lr': 'PSNR LR input (dB)',
    'psnr_restored': 'PSNR restored (dB)',
    'psnr_vae_hr': 'PSNR VAE decode of the HR latent: ceiling (dB)',
    'psnr_vae_lr': 'PSNR VAE decode of the LR latent (dB)',
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', required=True, help='a TOLA test option file with one TextDegradationDataset')
    parser.add_argument('--checkpoint', help='adaptation checkpoint (default: path.pretrain_network_g)')
    parser.add_argument('--frozen', action='store_true', help='without LoRA and LRC: the frozen one-step backbone')
    parser.add_argument('--num', type=int, default=0, help='first N lines only (default: all)')
    parser.add_argument('--batch', type=int, default=8, help='lines per forward pass (default 8)')
    parser.add_argument('--out', help='write the results to this JSON file')
    args = parser.parse_args(argv)
    if args.frozen and args.checkpoint:
        parser.error('--frozen runs without adapters: drop --checkpoint')
    if args.batch < 1 or args.num < 0:
        parser.error('--batch must be >= 1 and --num >= 0')

    import torch

    from basicsr.archs import build_network

    from tola_plugin.archs.tola_arch import TOLANet
    from tola_plugin.archs.tola_loading import read_tola_options
    from tola_plugin.data.text_degradation_dataset import TextDegradationDataset, held_out_dataset_opt
    from tola_plugin.demo.one_step_error import mean_over_batches, one_step_error
    from tola_plugin.utils.checkpoint_io import atomic_write

    opt = read_tola_options(args.opt)
    if args.frozen:
        net = build_network(dict(opt['network_g'], idm_lora=False, vae_lora=False, lrc=None)).eval()
    else:
        net = TOLANet.from_options(args.opt, args.checkpoint)
    if net.text_prior == 'gt':
        raise ValueError(f"{args.opt}: network_g.text_prior 'gt' needs ground-truth tokens; use 'predicted'")
    dataset = TextDegradationDataset(held_out_dataset_opt(opt, args.opt))
    count = min(args.num or len(dataset), len(dataset))
    parts, sizes = [], []
    for start in range(0, count, args.batch):
        items = [dataset[i] for i in range(start, min(start + args.batch, count))]
        lq = torch.stack([it['lq'] for it in items])
        gt = torch.stack([it['gt'] for it in items])
        parts.append(one_step_error(net, lq, gt, first_seed=start))
        sizes.append(len(items))
    result = dict(mean_over_batches(parts, sizes), lines=count, frozen=args.frozen)
    for key, text in DESCRIPTIONS.items():
        if key in result:
            print(f'{text:<48} {result[key]:10.4f}')
    if args.out:

        def write(tmp):
            with open(tmp, 'w', encoding='utf-8') as f:
                json.dump(result, f, indent=1)

        atomic_write(args.out, write)
        print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    run_tool(main)
