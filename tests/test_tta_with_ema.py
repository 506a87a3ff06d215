"""``tools/test.py --tta`` on a config with an EMA hook evaluates the EMA weights it announces (issue 43.2).

Under ``--tta`` the model is mmpretrain's ``AverageClsScoreTTA`` around the classifier, and an EMA hook copies
``runner.model``: its copy's keys start with ``module.``, so no key of the file fitted it, and ``--allow-partial`` used
to score the randomly initialised copy while the log said "Start testing on EMA model". Every hook (mmpretrain's,
mmengine's, a user's subclass) now fills its copy from the file by its own rule (a copy that loaded nothing is refused
whatever the policy: test_honest_weights.py)."""

import pytest
import torch
from guard_helpers import build_workspace
from test_honest_weights import HOOKS, QUICK_START, ema_checkpoint, ema_config, scores


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('tta_ws'))


@pytest.mark.parametrize('hook', HOOKS)
def test_tta_with_an_ema_hook_scores_the_ema_weights(ws, tmp_path, hook):
    """The file's ``state_dict`` is the EMA weights (as an EMA hook saves it), ``ema_state_dict`` the raw ones; every
    hook tests the EMA weights, so ``--tta`` with the hook scores what ``--tta`` without it scores from that file,
    and not what the raw weights score."""
    config = ema_config(tmp_path, hook)
    ckpt, raw, ema = ema_checkpoint(config, tmp_path / 'ema.pth')
    torch.save({'state_dict': raw, 'meta': {}}, tmp_path / 'raw.pth')
    with_hook = scores(ws, config, ckpt, tmp_path / 'hook.pkl', '--tta')
    plain = scores(ws, QUICK_START, ckpt, tmp_path / 'plain.pkl', '--tta')
    assert torch.equal(with_hook, plain)
    assert not torch.allclose(with_hook, scores(ws, QUICK_START, tmp_path / 'raw.pth', tmp_path / 'raw.pkl', '--tta'))


def test_an_ema_state_dict_with_a_weight_the_state_dict_lacks_is_one_line(ws, tmp_path):
    """mmengine's and mmpretrain's hooks swap each ``module.<key>`` with ``state_dict[<key>]``: a KeyError before."""
    config = ema_config(tmp_path, 'mmpretrain')
    ckpt, _, _ = ema_checkpoint(config, tmp_path / 'ema.pth')
    checkpoint = torch.load(ckpt, weights_only=False)
    checkpoint['ema_state_dict']['module.backbone.extra'] = torch.zeros(3)
    torch.save(checkpoint, tmp_path / 'extra.pth')
    with pytest.raises(SystemExit) as e:
        scores(ws, config, tmp_path / 'extra.pth', tmp_path / 'extra.pkl')
    message = str(e.value)
    assert message.startswith(
        f'error: checkpoint {tmp_path / "extra.pth"}: its ema_state_dict has 1 weights its '
        'state_dict lacks (first: module.backbone.extra), which EMAHook cannot pair'
    )
    assert '\n' not in message
