"""Which trace users each backbone serves: the build-time check of every pair, as a table.

A *trace user* is a registered component with a class-level ``trace_request``
(:class:`~mmvitreg.models.trace.TraceRequest`): heads, auxiliary losses, target transforms and token
mixes. For each backbone of :data:`BACKBONES` (small instances of the real classes) and each user,
:func:`support_table` runs :func:`~mmvitreg.models.trace.check_trace_user`, the check a
:class:`~mmvitreg.models.classifiers.TokenClassifier` makes when it is built, and keeps its verdict.
``tools/analysis_tools/trace_support.py`` prints it.
"""
from typing import Dict, List, Tuple

from mmvitreg.models.trace import CAPABILITIES, TraceRequest, check_trace_user

# name -> a small config of the real backbone class (numbers do not change what it serves)
BACKBONES: Dict[str, dict] = {
    'mmvitreg.VisionTransformer (DeiT)': dict(
        type='mmvitreg.VisionTransformer', arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                                     feedforward_channels=64), img_size=32, patch_size=8),
    'mmvitreg.DeepViT': dict(type='mmvitreg.DeepViT', arch='16b', img_size=32),
    'mmvitreg.LVViT': dict(type='mmvitreg.LVViT', arch='t', img_size=32),
    'mmvitreg.SwinTransformer': dict(type='mmvitreg.SwinTransformer', arch=dict(embed_dims=16, depths=[2, 2],
                                                                               num_heads=[1, 2]), img_size=32,
                                       out_indices=(1, )),
    'mmpretrain.VisionTransformer': dict(type='mmpretrain.VisionTransformer', arch='deit-tiny', img_size=32,
                                         patch_size=8),
    'mmpretrain.SwinTransformer': dict(type='mmpretrain.SwinTransformer', arch='tiny', img_size=32),
    'mmpretrain.ResNet': dict(type='mmpretrain.ResNet', depth=18),
    'mmpretrain.T2T_ViT': dict(type='mmpretrain.T2T_ViT', img_size=32, num_layers=1),
    'mmpretrain.ConvNeXt': dict(type='mmpretrain.ConvNeXt', arch='atto'),
}
# a user that reads only the backbone's outputs (e.g. DRLoc on a ResNet's last feature map)
FEATURE_MAP_USER = ('(feature-map-only aux loss)', TraceRequest())


def trace_users() -> List[Tuple[str, TraceRequest]]:
    """``(name, class-level request)`` of every registered trace user of mmvitreg, plus the generic
    feature-map-only user."""
    from mmvitreg.registry import BATCH_AUGMENTS, MODELS
    users = [FEATURE_MAP_USER]
    for registry in (MODELS, BATCH_AUGMENTS):
        registry.import_from_location()
        for name, cls in sorted(registry.module_dict.items()):
            request = getattr(cls, 'trace_request', None)
            if isinstance(request, TraceRequest):
                users.append((f'mmvitreg.{name}', request))
    return users


def support_table() -> Dict[str, Dict[str, str]]:
    """``{backbone: {user: 'yes' | the build-time error}}`` for :data:`BACKBONES` x :func:`trace_users`."""
    from mmengine.registry import MODELS
    table = {}
    for backbone_name, cfg in BACKBONES.items():
        backbone = MODELS.build(cfg)
        row = table[backbone_name] = {}
        for user_name, request in trace_users():
            try:
                check_trace_user(backbone, request, user_name)
                row[user_name] = 'yes'
            except (TypeError, IndexError) as e:
                row[user_name] = str(e)
    return table


def format_table(table: Dict[str, Dict[str, str]]) -> str:
    """The table as text: one line per backbone with the users it serves, then why the others fail."""
    lines = ['capabilities: ' + '; '.join(f'{k} = {v}' for k, v in CAPABILITIES.items()), '']
    for backbone, row in table.items():
        served = [u for u, verdict in row.items() if verdict == 'yes']
        lines.append(f'{backbone}: serves {", ".join(served) or "nothing"}')
        lines += [f'    not {u}: {verdict}' for u, verdict in row.items() if verdict != 'yes']
    return '\n'.join(lines)
