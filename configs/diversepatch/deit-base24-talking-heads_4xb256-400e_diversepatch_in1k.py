# DeiT-Base24 + talking-heads attention + DiversePatch: the model of the official VIT-B24 release (83.3; the
# official code's default use_talk=True), whose proj_pre / proj_post (heads x heads, no bias) in every block a
# config without talking heads has no place for (its load stops, naming them).
_base_ = './deit-base24_4xb256-400e_diversepatch_in1k.py'

model = dict(
    backbone=dict(
        arch=dict(
            _delete_=True,
            embed_dims=768,
            num_layers=24,
            num_heads=12,
            feedforward_channels=3072,
            attn_types='talking_heads',
        )
    )
)
