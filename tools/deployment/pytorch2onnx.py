"""Export a trained model's inference path to ONNX, and check it against onnxruntime.

    python tools/deployment/pytorch2onnx.py CONFIG CKPT [--out F] [--shape H W] [--opset N] [--verify]
                                            [--allow-partial] [--cfg-options k=v ...]

Serves mmpretrain classifiers (``ImageClassifier``, ``mmvitreg.TokenClassifier``) and mmseg segmentors
(e.g. UperNet) with any of the backbones: ViT/DeiT, DeepViT re-attention, talking heads, LV-ViT (conv
stem; the token-labeling head's inference score), Swin, CvT. The checkpoint is read by the loader of every
tool (:func:`mmvitreg.engine.checkpoint.load_weights`: local or remote, an official release converted) and
loads strictly: a key it lacks or has too many of stops the export with one ``error:`` line naming them and
``--allow-partial``, which exports from the keys that fit.

What is exported is ``model(inputs, mode='tensor')``, the network after the data preprocessor:

* input ``inputs`` ``(B, 3, H, W)`` float32, images already normalised by the config's
  ``data_preprocessor`` (its mean / std are printed); the batch axis is dynamic,
  ``H, W`` are fixed to ``--shape`` (default: the backbone's ``img_size``, else the config's
  ``crop_size``, else 224);
* output ``scores``: for a classifier the head's class scores ``(B, K)`` before the softmax (for
  :class:`~mmvitreg.models.heads.TokenLabelHead` the official rule ``X^cls + aux_pred_weight * max_i X^i``); for a
  segmentor the decode head's logits ``(B, K, H / 4, W / 4)`` (resize to ``H, W`` and take the argmax
  outside). No token trace is built unless the head asks for one (the token-labeling head reads the
  token grid from it; its shapes become constants of the graph).

Exporter: the TorchScript one (``torch.onnx.export(..., dynamo=False)``). The dynamo exporter
(``torch.export`` + onnxscript) fails on Swin while decomposing the exported program (reported in issue 22 on
this stack) and needs onnxscript besides; the TorchScript exporter needs only torch (``onnx`` / ``onnxruntime`` only for
``--verify``). Opset 17 by default (LayerNormalization is native from 17).

``--verify`` runs the file in onnxruntime on a random batch of 2 and prints the largest absolute
difference from PyTorch (``max |d| = ...``); it fails above 1e-4. mmseg's pyramid pooling (``PPM``,
adaptive average pooling into 1, 2, 3 and 6 bins) is exported as the plain average pooling it equals at
the fixed size (:func:`fix_adaptive_pools`), so the last feature map's sides must be multiples of 6:
with a stride of 32, ``H, W`` multiples of 192.
"""

import argparse
import os.path as osp
import sys
from typing import Tuple

import torch
from mmengine.config import Config
from torch import nn

import mmvitreg  # noqa: F401  (applies mmvitreg.compat)
from mmvitreg.engine.checkpoint import CheckpointError, is_local
from mmvitreg.utils import ConfigError, build_model, load_config, parse_tool_args

TOLERANCE = 1e-4


def default_shape(cfg: Config) -> Tuple[int, int]:
    """The export's ``(H, W)``: the backbone's ``img_size``, else the config's ``crop_size``, else 224."""
    size = cfg.model.get('backbone', {}).get('img_size') or cfg.get('crop_size') or 224
    return (size, size) if isinstance(size, int) else tuple(size)


def check_exportable(model: nn.Module) -> None:
    """Fail on a model whose prediction is not ``mode='tensor'`` (an ensemble of auxiliary scores)."""
    ensemble = [type(a).__name__ for a in getattr(model, 'aux_losses', ()) if getattr(a, 'ensemble', False)]
    if ensemble:
        raise ConfigError(
            f'{", ".join(ensemble)} joins the prediction (ensemble=True), which the exported '
            "head scores do not include: export with --cfg-options for that loss's ensemble=False"
        )


def fix_adaptive_pools(net: nn.Module, inputs: torch.Tensor) -> None:
    """Replace every ``nn.AdaptiveAvgPool2d`` with a bin size > 1 (mmseg's pyramid pooling) by the
    ``nn.AvgPool2d`` it equals at the export's input size, in place.

    The TorchScript exporter cannot export an adaptive pool whose input size it does not know, and the
    sizes after a Swin stage are traced values; at a fixed size whose sides are multiples of the bins, the
    adaptive pool is a plain average pool with kernel = stride = side / bins (as mmdeploy rewrites it).

    Raises:
        ConfigError: a side is not a multiple of its pool's bins (names the pool and the sizes).
    """

    def bins_of(pool):
        size = pool.output_size
        return tuple(size) if isinstance(size, (tuple, list)) else (size, size)

    sizes = {}
    pools = {name: m for name, m in net.named_modules() if isinstance(m, nn.AdaptiveAvgPool2d) and bins_of(m) != (1, 1)}
    hooks = [
        m.register_forward_pre_hook(lambda m, args, name=name: sizes.update({name: args[0].shape[-2:]}))
        for name, m in pools.items()
    ]
    with torch.no_grad():
        net(inputs)
    for hook in hooks:
        hook.remove()
    for name, pool in pools.items():
        bins, side = bins_of(pool), tuple(sizes[name])
        if any(s % b for s, b in zip(side, bins)):
            raise ConfigError(
                f'{name} pools a {side} map into {bins} bins, which ONNX cannot export: pick a --shape '
                'whose feature map there is a multiple of the bins'
            )
        kernel = tuple(s // b for s, b in zip(side, bins))
        parent, _, attr = name.rpartition('.')
        setattr(net.get_submodule(parent), attr, nn.AvgPool2d(kernel, kernel))


class TensorMode(nn.Module):
    """``model(inputs, mode='tensor')`` as a one-input module (what the exporter traces)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        out = self.model(inputs, mode='tensor')
        return out[-1] if isinstance(out, (tuple, list)) else out


def export(
    cfg: Config, checkpoint: str, out: str, shape: Tuple[int, int], opset: int = 17, allow_partial: bool = False
) -> nn.Module:
    """Build ``cfg``'s model with ``checkpoint`` (strictly, unless ``allow_partial``), export its
    ``mode='tensor'`` path for ``(1, 3, *shape)`` inputs to ``out``; return the model (eval mode, CPU) as traced."""
    from mmengine.registry import DefaultScope

    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = build_model(cfg, checkpoint, 'cpu', allow_partial)
    check_exportable(model)
    net = TensorMode(model).eval()
    dummy = torch.randn(1, 3, *shape)
    fix_adaptive_pools(net, dummy)
    with torch.no_grad():
        torch.onnx.export(
            net,
            (dummy,),
            out,
            dynamo=False,
            opset_version=opset,
            input_names=['inputs'],
            output_names=['scores'],
            dynamic_axes={'inputs': {0: 'batch'}, 'scores': {0: 'batch'}},
        )
    return net


def max_abs_diff(net: nn.Module, onnx_file: str, shape: Tuple[int, int], batch_size: int = 2, seed: int = 0) -> float:
    """Largest ``|onnxruntime - PyTorch|`` over the outputs for a random ``(batch_size, 3, *shape)`` batch."""
    import onnxruntime as ort

    inputs = torch.randn(batch_size, 3, *shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = net(inputs)
    session = ort.InferenceSession(onnx_file, providers=['CPUExecutionProvider'])
    (got,) = session.run(None, {'inputs': inputs.numpy()})
    if got.shape != tuple(expected.shape):
        raise AssertionError(f'onnxruntime gives shape {got.shape}, PyTorch {tuple(expected.shape)}')
    return float((torch.from_numpy(got) - expected).abs().max())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Export a model (mmpretrain / mmseg config) to ONNX')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file (loaded strictly)')
    parser.add_argument('--out', help='output file (default: the checkpoint\'s name with .onnx)')
    parser.add_argument(
        '--shape',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        help='input height and width (default: the backbone\'s img_size, else crop_size, else 224)',
    )
    parser.add_argument(
        '--allow-partial',
        action='store_true',
        help='use a checkpoint whose keys do not all fit the model (the keys that fit are loaded)',
    )
    parser.add_argument('--opset', type=int, default=17, help='ONNX opset version (default: 17)')
    parser.add_argument(
        '--verify',
        action='store_true',
        help=f'compare onnxruntime with PyTorch on a random batch (fails above {TOLERANCE:g})',
    )
    return parse_tool_args(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        if cfg.default_scope not in ('mmpretrain', 'mmseg'):
            raise ConfigError(f'{args.config}: export serves mmpretrain and mmseg configs, not {cfg.default_scope}')
        if is_local(args.checkpoint) and not osp.isfile(args.checkpoint):
            raise ConfigError(f'checkpoint not found: {args.checkpoint}')
        shape = tuple(args.shape) if args.shape else default_shape(cfg)
        out = (
            args.out
            or osp.splitext(osp.basename(args.checkpoint) if not is_local(args.checkpoint) else args.checkpoint)[0]
            + '.onnx'
        )
        net = export(cfg, args.checkpoint, out, shape, args.opset, args.allow_partial)
    except (ConfigError, CheckpointError) as e:
        sys.exit(f'error: {e}')
    preprocessor = net.model.data_preprocessor
    print(
        f'exported {out}: inputs (batch, 3, {shape[0]}, {shape[1]}), normalised as the config\'s '
        f'data_preprocessor does (mean {preprocessor.mean.flatten().tolist()}, '
        f'std {preprocessor.std.flatten().tolist()})'
    )
    if args.verify:
        diff = max_abs_diff(net, out, shape)
        print(f'onnxruntime vs PyTorch: max |d| = {diff:.3g}')
        if diff > TOLERANCE:
            sys.exit(f'error: onnxruntime differs from PyTorch by {diff:.3g} > {TOLERANCE:g}')


if __name__ == '__main__':
    main()
