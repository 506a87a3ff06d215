# DeepViT-32B (paper Table 4: 80.9%): 384-dim, 32 blocks, re-attention in every block, trained as the
# official scripts/DeepViT_32B_pure_transformer.yaml: the shared recipe with `mixup: 0.1`, `cutmix: 0`,
# `amp: True` and the cosine-similarity regulariser `cos_reg_component: 12` (not in the paper's text).
_base_ = './deepvit_8xb32_in1k_recipe.py'

model = dict(
    # mmvitreg.TokenClassifier: mmpretrain's ImageClassifier that lets auxiliary losses read the
    # attention maps through the token trace (one backbone pass)
    type='mmvitreg.TokenClassifier',
    backbone=dict(arch='32b'),
    head=dict(in_channels=384),
    # official SoftTargetCrossEntropyCosReg: + 0.1 * mean cosine (over heads) of the attention maps
    # of blocks l and l + 1, l = 0 .. 11
    aux_losses=[dict(type='mmvitreg.AttentionCosineLoss', num_pairs=12, loss_weight=0.1)],
    # official `mixup: 0.1`, `cutmix: 0` (mixup_prob 1.0: every batch)
    train_cfg=dict(_delete_=True, augments=[dict(type='Mixup', alpha=0.1)]),
)
# official `amp: True` (torch.cuda.amp autocast + GradScaler)
optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic')
