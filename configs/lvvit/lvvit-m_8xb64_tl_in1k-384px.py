# LV-ViT-M fine-tuned at 384 (paper Table 10: 85.4%): the LV-ViT-S 384 fine-tuning recipe with the M
# model (drop path 0.2) from its 224 checkpoint. Also the eval config of the official lvvit_m 384
# checkpoint (crop_pct 1.0).
_base_ = './lvvit-s_8xb64_tl_in1k-384px.py'

load_from = 'work_dirs/lvvit-m_8xb128_tl_in1k/epoch_300.pth'
model = dict(backbone=dict(arch='m', drop_path_rate=0.2), head=dict(in_channels=512))
