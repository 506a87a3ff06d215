# DeiT-Base12 + talking-heads attention + DiversePatch (paper Table 6, "+ Talking Head": 82.7 at 300 epochs; the
# official code's default, use_talk=True): proj_pre / proj_post (heads x heads, no bias) in every block.
_base_ = './deit-base12_4xb256-400e_diversepatch_in1k.py'

model = dict(
    backbone=dict(
        arch=dict(
            _delete_=True,
            embed_dims=768,
            num_layers=12,
            num_heads=12,
            feedforward_channels=3072,
            attn_types='talking_heads',
        )
    )
)
