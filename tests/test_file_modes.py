"""Files are written with the mode mmengine would give them (issue 43.5): ``open(path, 'wb')``'s 0o666 less the
umask, for checkpoints (the atomic backend) and label maps alike; they used to be 0o600, the temporary file's mode,
unreadable by the rest of a team on a shared cluster."""

import os
import stat

import pytest
import torch

from mmvitreg.datasets.label_maps import save_label_map
from mmvitreg.engine import AtomicLocalBackend


@pytest.mark.parametrize('umask', [0o022, 0o027, 0o077])
def test_checkpoints_and_label_maps_get_the_mode_open_would_give(tmp_path, umask):
    old = os.umask(umask)
    try:
        AtomicLocalBackend().put(b'weights', tmp_path / 'epoch_1.pth')
        save_label_map(str(tmp_path / 'maps' / 'a.pt'), torch.zeros(5, 2, 2), torch.zeros(5, 2, 2))
        with open(tmp_path / 'plain', 'wb'):  # what mmengine's LocalBackend.put does
            pass
    finally:
        os.umask(old)
    modes = {
        p.name: stat.S_IMODE(p.stat().st_mode)
        for p in (tmp_path / 'epoch_1.pth', tmp_path / 'maps' / 'a.pt', tmp_path / 'plain')
    }
    assert modes == {'epoch_1.pth': 0o666 & ~umask, 'a.pt': 0o666 & ~umask, 'plain': 0o666 & ~umask}
