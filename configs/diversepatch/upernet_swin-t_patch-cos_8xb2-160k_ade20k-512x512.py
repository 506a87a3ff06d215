# UperNet Swin-T on ADE20K with DiversePatch's patch-wise cosine loss during segmentation training. Beyond the
# paper: the paper fine-tunes backbones pre-trained with its losses and trains segmentation without them (official
# issue #4: "We do not apply our loss for segmentation", as segmentation already gives dense labels); no official
# code has the cosine loss at all; no published number.
# The recipe is mmseg's own Swin-T UperNet ADE20K one (configs/swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py:
# AdamW 6e-5, poly, 160k iterations, 8 GPUs x 2 images, 512x512 crops); only the model's type changes to
# mmvitreg.TokenSegmentor, which adds `aux_losses` to mmseg's EncoderDecoder.
# The cosine loss reads the last stage's tokens before the backbone's norm (16x16 at 512x512; the paper's h^[L]
# on a Swin) with alpha_1 = 1 (paper §4: alpha_1 = alpha_2 = alpha_3 = 1, untuned). No contrastive loss: the paper
# does not define it across Swin's down-sampling (Table 5, N/A). Baseline: --cfg-options model.aux_losses=[]
_base_ = '../swin/upernet_swin-t_8xb2-160k_ade20k-512x512.py'

model = dict(type='mmvitreg.TokenSegmentor', aux_losses=[dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0)])
