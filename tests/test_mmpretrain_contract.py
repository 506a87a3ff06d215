"""Drop-in contract: mmpretrain 1.2.0's own backbone tests, run against mmvitreg's Swin and ViT.

Each test below makes the calls and the assertions of one test of mmpretrain v1.2.0
(``tests/test_models/test_backbones/test_swin_transformer.py`` and ``test_vision_transformer.py``),
with mmpretrain's class swapped for mmvitreg's; checkpoints go to a temporary directory instead of
``tempfile.gettempdir()``. The last tests check mmvitreg's own addition to that contract: every error
starts with mmpretrain's wording (what mmpretrain's tests and users match) and then names the fix.
"""

import math
import os
import tempfile
from copy import deepcopy
from itertools import chain
from unittest import TestCase

import pytest
import torch
import torch.nn.functional as F
from mmengine.runner import load_checkpoint, save_checkpoint
from mmengine.utils.dl_utils.parrots_wrapper import _BatchNorm
from mmpretrain.models.backbones.swin_transformer import SwinBlock

from mmvitreg.models.backbones import SwinTransformer, VisionTransformer
from mmvitreg.models.trace import TokenTrace


def timm_resize_pos_embed(posemb, posemb_new, num_tokens=1):
    """timm's position-embedding resize (bicubic on the square grid, extra tokens kept), which mmpretrain's
    tests (``test_backbones/utils.py``) take as the reference for the resize on load."""
    grid_new = int(math.sqrt(posemb_new.shape[1] - num_tokens))
    tokens, grid = posemb[:, :num_tokens], posemb[0, num_tokens:]
    side = int(math.sqrt(len(grid)))
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(grid_new, grid_new), mode='bicubic', align_corners=False)
    return torch.cat([tokens, grid.permute(0, 2, 3, 1).reshape(1, grid_new**2, -1)], dim=1)


def check_norm_state(modules, train_state):
    """Whether every BatchNorm is in ``train_state`` (mmpretrain's test helper)."""
    return all(mod.training == train_state for mod in modules if isinstance(mod, _BatchNorm))


class TestSwinTransformer(TestCase):
    """mmpretrain v1.2.0 ``test_swin_transformer.py::TestSwinTransformer``."""

    def setUp(self):
        self.cfg = dict(arch='tiny', img_size=224, patch_size=4, drop_path_rate=0.1)

    def test_arch(self):
        """Mirrors ``test_arch``: bad preset name, incomplete custom arch, custom arch."""
        with self.assertRaisesRegex(AssertionError, 'not in default archs'):
            SwinTransformer(**dict(self.cfg, arch='unknown'))
        with self.assertRaisesRegex(AssertionError, 'Custom arch needs'):
            SwinTransformer(**dict(self.cfg, arch={'embed_dims': 96, 'num_heads': [3, 6, 12, 16]}))

        depths, num_heads = [2, 2, 4, 2], [6, 12, 6, 12]
        model = SwinTransformer(**dict(self.cfg, arch={'embed_dims': 256, 'depths': depths, 'num_heads': num_heads}))
        for i, stage in enumerate(model.stages):
            self.assertEqual(stage.embed_dims, 256 * (2**i))
            self.assertEqual(len(stage.blocks), depths[i])
            self.assertEqual(stage.blocks[0].attn.w_msa.num_heads, num_heads[i])

    def test_init_weights(self):
        """Mirrors ``test_init_weights``: init_cfg, v1/v3 checkpoints, absolute position embedding resized on load."""
        cfg = dict(
            self.cfg,
            use_abs_pos_embed=True,
            init_cfg=[dict(type='Kaiming', layer='Conv2d', mode='fan_in', nonlinearity='linear')],
        )
        model = SwinTransformer(**cfg)
        ori_weight = model.patch_embed.projection.weight.clone().detach()
        self.assertTrue(torch.allclose(model.absolute_pos_embed, torch.tensor(0.0)))
        model.init_weights()
        self.assertFalse(torch.allclose(ori_weight, model.patch_embed.projection.weight))
        self.assertFalse(torch.allclose(model.absolute_pos_embed, torch.tensor(0.0)))
        pretrain_pos_embed = model.absolute_pos_embed.clone().detach()

        with tempfile.TemporaryDirectory() as tmpdir:
            checkpoint_v3 = os.path.join(tmpdir, 'v3.pth')
            save_checkpoint(model.state_dict(), checkpoint_v3)
            # a version-1 checkpoint: one ``norm`` for the last stage, ``attn_mask`` buffers
            setattr(model, 'norm', model.norm3)
            setattr(model.stages[0].blocks[1].attn, 'attn_mask', torch.zeros(64, 49, 49))
            model._version = 1
            del model.norm3
            checkpoint_v1 = os.path.join(tmpdir, 'v1.pth')
            save_checkpoint(model.state_dict(), checkpoint_v1)

            load_checkpoint(SwinTransformer(**dict(self.cfg, use_abs_pos_embed=True)), checkpoint_v1, strict=True)
            load_checkpoint(SwinTransformer(**dict(self.cfg, use_abs_pos_embed=True)), checkpoint_v3, strict=True)

            model = SwinTransformer(**dict(self.cfg, img_size=384, use_abs_pos_embed=True))
            load_checkpoint(model, checkpoint_v3, strict=True)
        resized_pos_embed = timm_resize_pos_embed(pretrain_pos_embed, model.absolute_pos_embed, num_tokens=0)
        self.assertTrue(torch.allclose(model.absolute_pos_embed, resized_pos_embed))

    def test_forward(self):
        """Mirrors ``test_forward``: output shapes, window 12 (and its small-map error), pad_small_map, several
        outputs, activation checkpointing, dynamic input sizes."""
        imgs = torch.randn(1, 3, 224, 224)
        outs = SwinTransformer(**self.cfg)(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768, 7, 7))

        model = SwinTransformer(**dict(self.cfg, window_size=12))
        outs = model(torch.randn(1, 3, 384, 384))
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768, 12, 12))
        with self.assertRaisesRegex(AssertionError, r'the window size \(12\)'):
            model(torch.randn(1, 3, 224, 224))

        outs = SwinTransformer(**dict(self.cfg, window_size=12, pad_small_map=True))(torch.randn(1, 3, 224, 224))
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768, 7, 7))

        outs = SwinTransformer(**dict(self.cfg, out_indices=(0, 1, 2, 3)))(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 4)
        for stride, out in zip([1, 2, 4, 8], outs):
            self.assertEqual(out.shape, (1, 96 * stride, 56 // stride, 56 // stride))

        model = SwinTransformer(**dict(self.cfg, with_cp=True))
        for m in model.modules():
            if isinstance(m, SwinBlock):
                self.assertTrue(m.with_cp)
        model.init_weights()
        model.train()
        outs = model(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768, 7, 7))

        model = SwinTransformer(**self.cfg)
        for imgs in [torch.randn(1, 3, 224, 224), torch.randn(1, 3, 256, 256), torch.randn(1, 3, 256, 309)]:
            outs = model(imgs)
            self.assertIsInstance(outs, tuple)
            self.assertEqual(len(outs), 1)
            expect_feat_shape = (math.ceil(imgs.shape[2] / 32), math.ceil(imgs.shape[3] / 32))
            self.assertEqual(outs[-1].shape, (1, 768, *expect_feat_shape))

    def test_structure(self):
        """Mirrors ``test_structure``: drop-path decay, norm_eval with BatchNorms, frozen first stage."""
        model = SwinTransformer(**dict(self.cfg, drop_path_rate=0.2))
        depths = model.arch_settings['depths']
        for i, block in enumerate(chain(*[stage.blocks for stage in model.stages])):
            expect_prob = 0.2 / (sum(depths) - 1) * i
            self.assertAlmostEqual(block.ffn.dropout_layer.drop_prob, expect_prob)
            self.assertAlmostEqual(block.attn.drop.drop_prob, expect_prob)

        model = SwinTransformer(
            **dict(
                self.cfg,
                norm_eval=True,
                norm_cfg=dict(type='BN'),
                stage_cfgs=dict(block_cfgs=dict(norm_cfg=dict(type='BN'))),
            )
        )
        model.init_weights()
        model.train()
        self.assertTrue(check_norm_state(model.modules(), False))

        frozen_stages = 0
        model = SwinTransformer(**dict(self.cfg, frozen_stages=frozen_stages, out_indices=(0, 1, 2, 3)))
        model.init_weights()
        model.train()
        self.assertFalse(model.patch_embed.training)
        for param in model.patch_embed.parameters():
            self.assertFalse(param.requires_grad)
        for i in range(frozen_stages + 1):
            for param in model.stages[i].parameters():
                self.assertFalse(param.requires_grad)
        for param in model.norm0.parameters():
            self.assertFalse(param.requires_grad)
        for i in range(frozen_stages + 1, 4):
            for param in model.stages[i].parameters():
                self.assertTrue(param.requires_grad)
            for param in getattr(model, f'norm{i}').parameters():
                self.assertTrue(param.requires_grad)


class TestVisionTransformer(TestCase):
    """mmpretrain v1.2.0 ``test_vision_transformer.py::TestVisionTransformer``."""

    def setUp(self):
        self.cfg = dict(arch='b', img_size=224, patch_size=16, drop_path_rate=0.1)

    def test_structure(self):
        """Mirrors ``test_structure``: arch errors, custom arch, out_indices errors, drop-path decay, pre_norm."""
        with self.assertRaisesRegex(AssertionError, 'not in default archs'):
            VisionTransformer(**dict(self.cfg, arch='unknown'))
        with self.assertRaisesRegex(AssertionError, 'Custom arch needs'):
            VisionTransformer(**dict(self.cfg, arch={'num_layers': 24, 'num_heads': 16, 'feedforward_channels': 4096}))

        cfg = dict(self.cfg, arch={'embed_dims': 128, 'num_layers': 24, 'num_heads': 16, 'feedforward_channels': 1024})
        model = VisionTransformer(**cfg)
        self.assertEqual(model.embed_dims, 128)
        self.assertEqual(model.num_layers, 24)
        for layer in model.layers:
            self.assertEqual(layer.attn.num_heads, 16)
            self.assertEqual(layer.ffn.feedforward_channels, 1024)

        cfg = deepcopy(self.cfg)
        cfg['out_indices'] = {1: 1}
        with self.assertRaisesRegex(AssertionError, "get <class 'dict'>"):
            VisionTransformer(**cfg)
        cfg['out_indices'] = [0, 13]
        with self.assertRaisesRegex(AssertionError, 'Invalid out_indices 13'):
            VisionTransformer(**cfg)

        model = VisionTransformer(**self.cfg)
        self.assertEqual(len(model.layers), 12)
        dpr_inc, dpr = 0.1 / (12 - 1), 0
        for layer in model.layers:
            self.assertEqual(layer.attn.embed_dims, 768)
            self.assertEqual(layer.attn.num_heads, 12)
            self.assertEqual(layer.ffn.feedforward_channels, 3072)
            self.assertAlmostEqual(layer.attn.out_drop.drop_prob, dpr)
            self.assertAlmostEqual(layer.ffn.dropout_layer.drop_prob, dpr)
            dpr += dpr_inc

        model = VisionTransformer(**dict(self.cfg, pre_norm=True))
        self.assertNotEqual(model.pre_norm.__class__, torch.nn.Identity)

    def test_init_weights(self):
        """Mirrors ``test_init_weights``: init_cfg, strict reload, position embedding resized on load."""
        cfg = dict(self.cfg, init_cfg=[dict(type='Kaiming', layer='Conv2d', mode='fan_in', nonlinearity='linear')])
        model = VisionTransformer(**cfg)
        ori_weight = model.patch_embed.projection.weight.clone().detach()
        self.assertTrue(torch.allclose(model.pos_embed, torch.tensor(0.0)))
        model.init_weights()
        self.assertFalse(torch.allclose(ori_weight, model.patch_embed.projection.weight))
        self.assertFalse(torch.allclose(model.pos_embed, torch.tensor(0.0)))

        pretrain_pos_embed = model.pos_embed.clone().detach()
        with tempfile.TemporaryDirectory() as tmpdir:
            checkpoint = os.path.join(tmpdir, 'test.pth')
            save_checkpoint(model.state_dict(), checkpoint)
            model = VisionTransformer(**self.cfg)
            load_checkpoint(model, checkpoint, strict=True)
            self.assertTrue(torch.allclose(model.pos_embed, pretrain_pos_embed))

            model = VisionTransformer(**dict(self.cfg, img_size=384))
            load_checkpoint(model, checkpoint, strict=True)
        resized_pos_embed = timm_resize_pos_embed(pretrain_pos_embed, model.pos_embed)
        self.assertTrue(torch.allclose(model.pos_embed, resized_pos_embed))

    def test_forward(self):
        """Mirrors ``test_forward``: with_cls_token / out_type, several out_indices, dynamic input sizes."""
        imgs = torch.randn(1, 3, 224, 224)
        with self.assertRaisesRegex(ValueError, 'must be True'):
            VisionTransformer(**dict(self.cfg, with_cls_token=False, out_type='cls_token'))

        outs = VisionTransformer(**dict(self.cfg, with_cls_token=False, out_type='featmap'))(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768, 14, 14))

        outs = VisionTransformer(**self.cfg)(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 1)
        self.assertEqual(outs[-1].shape, (1, 768))

        outs = VisionTransformer(**dict(self.cfg, out_indices=[-3, -2, -1]))(imgs)
        self.assertIsInstance(outs, tuple)
        self.assertEqual(len(outs), 3)
        for out in outs:
            self.assertEqual(out.shape, (1, 768))

        model = VisionTransformer(**dict(self.cfg, out_type='featmap'))
        for imgs in [torch.randn(1, 3, 224, 224), torch.randn(1, 3, 256, 256), torch.randn(1, 3, 256, 309)]:
            outs = model(imgs)
            self.assertIsInstance(outs, tuple)
            self.assertEqual(len(outs), 1)
            expect_feat_shape = (math.ceil(imgs.shape[2] / 16), math.ceil(imgs.shape[3] / 16))
            self.assertEqual(outs[-1].shape, (1, 768, *expect_feat_shape))


TINY_VIT = dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=96)
TINY_SWIN = dict(embed_dims=16, depths=[2, 2], num_heads=[1, 2])
ERRORS = {
    'swin-arch-name': (
        lambda: SwinTransformer(arch='unknown'),
        'Arch unknown is not in default archs',
        'choose one of them',
    ),
    'swin-arch-dict': (
        lambda: SwinTransformer(arch={'embed_dims': 96, 'num_heads': [3, 6, 12, 16]}),
        'Custom arch needs a dict with keys',
        "add the missing keys ['depths']",
    ),
    'swin-small-map': (
        lambda: SwinTransformer(arch=TINY_SWIN, window_size=8, out_indices=(1,))(
            torch.randn(1, 3, 16, 16), TokenTrace(token_layers=(0,))
        ),
        'The input shape (4, 4) is smaller than the window size (8)',
        'set pad_small_map=True',
    ),
    'vit-arch-name': (
        lambda: VisionTransformer(arch='unknown'),
        'Arch unknown is not in default archs',
        'choose one of them',
    ),
    'vit-arch-dict': (
        lambda: VisionTransformer(arch={'num_layers': 24, 'num_heads': 16, 'feedforward_channels': 64}),
        'Custom arch needs a dict with keys',
        "add the missing keys ['embed_dims']",
    ),
    'vit-out-indices-type': (
        lambda: VisionTransformer(arch=TINY_VIT, out_indices={1: 1}),
        '"out_indices" must be a sequence or int, get <class \'dict\'>',
        'e.g. -1 or [3, 7, 11]',
    ),
    'vit-out-indices-range': (
        lambda: VisionTransformer(arch=TINY_VIT, out_indices=[0, 13]),
        'Invalid out_indices 13',
        'the 4 blocks have the indices 0 .. 3',
    ),
}


@pytest.mark.parametrize('case', sorted(ERRORS))
def test_errors_start_with_mmpretrains_wording_then_name_the_fix(case):
    """Where mmpretrain asserts, mmvitreg raises an error that is an AssertionError (what mmpretrain's tests
    catch) and a ValueError, whose message starts with mmpretrain's wording and then names the fix (the small-map
    case with a trace, which runs mmvitreg's window layout; without one mmpretrain's own assert fires)."""
    build, wording, fix = ERRORS[case]
    with pytest.raises(AssertionError) as info:
        build()
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(wording) and fix in message[len(wording) :], message
