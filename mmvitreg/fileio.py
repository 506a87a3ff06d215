"""Reading and writing files safely, at the bottom of the package (the data sets and the engine use it):
:func:`load_checkpoint` (``weights_only=True`` and the allow-list of what checkpoints hold) and :func:`atomic_write`
(a temporary ``os.replace``-d over the final name). How checkpoints are loaded: :mod:`mmvitreg.engine.checkpoint`.
"""
import os
import os.path as osp
import pickle
import re
import secrets
import socket
import time
from typing import Callable, IO, List, Optional, Tuple

import torch
from packaging.version import Version

#: environment variable that lets :func:`load_checkpoint` unpickle anything (``--unsafe-load`` sets it)
UNSAFE_LOAD_ENV = 'MMVITREG_UNSAFE_LOAD'
#: the help of every tool's ``--unsafe-load`` flag
UNSAFE_LOAD_HELP = (f'unpickle checkpoints and token label maps without the allow-list of what checkpoints hold (as '
                    f'{UNSAFE_LOAD_ENV}=1 does): a pickle can run code, so only for files you trust')
#: torch >= 2.6: ``weights_only=True`` by default, allow-list entries by name (the gate of :mod:`mmvitreg.compat`'s
#: ``checkpoint_weights_only``); an older torch unpickles everything by default, and :func:`load_checkpoint` with it
TORCH_WEIGHTS_ONLY = Version(torch.__version__).release >= (2, 6)
_REFUSED_GLOBAL = re.compile(r'GLOBAL (\S+)')  # torch's wording varies ('Unsupported global: GLOBAL x.y', ...)
_WEIGHTS_ONLY_ERROR = re.compile(r'WeightsUnpickler error:\s*([^\n]+)')


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint whose pickle needs more than :func:`checkpoint_safe_globals`; the message names
    the file, the offending global and the opt-in for trusted files."""


def _history_buffer_statistic(owner, name: str):
    """``getattr`` as mmengine's ``HistoryBuffer`` pickles use it, and only that.

    A ``HistoryBuffer`` keeps its statistic methods in its state (``{'min': HistoryBuffer.min, ...}``),
    which pickle writes as ``getattr(HistoryBuffer, 'min')``; allowing ``builtins.getattr`` itself would
    hand any attribute of any allowed class to the pickle.
    """
    from mmengine.logging import HistoryBuffer
    statistics = set(HistoryBuffer()._statistics_methods) | set(HistoryBuffer._statistics_methods)
    if owner is not HistoryBuffer or name not in statistics:
        raise pickle.UnpicklingError(f'getattr({owner!r}, {name!r}) is not a HistoryBuffer statistic')
    return getattr(owner, name)


def checkpoint_safe_globals() -> list:
    """The globals :func:`load_checkpoint` lets a checkpoint's pickle name, besides torch's own.

    Found by scanning the checkpoints ``tools/train.py`` writes for every technique's digits config
    (EMA included; ``tests/test_safe_loading.py`` loads them all) and the official releases the
    converters read. Each entry says why it is there.
    """
    import argparse
    import numpy as np
    from mmengine.logging import HistoryBuffer
    reconstruct = np.zeros(0).__reduce__()[0]  # numpy's array rebuild function, whatever module holds it
    scalar = np.float64(0).__reduce__()[0]  # numpy's scalar rebuild function
    numpy_dtypes = {type(np.dtype(c)) for c in np.typecodes['All'] if c not in 'OV'}  # no object/void dtype
    return [
        # mmengine's MessageHub.state_dict (checkpoint['message_hub']['log_scalars']) holds HistoryBuffers
        HistoryBuffer,
        (_history_buffer_statistic, 'builtins.getattr'),  # a HistoryBuffer's statistic methods (see there)
        # HistoryBuffer's histories, numpy.random.get_state() in our RNGStateHook's rng_state and numpy
        # scalars in meta / message_hub runtime_info (e.g. 'eta'): arrays, scalars and their dtypes, as
        # numpy 2 (numpy._core) and numpy 1 (numpy.core) name them
        np.ndarray, np.dtype, *sorted(numpy_dtypes, key=str),
        (reconstruct, 'numpy._core.multiarray._reconstruct'), (reconstruct, 'numpy.core.multiarray._reconstruct'),
        (scalar, 'numpy._core.multiarray.scalar'), (scalar, 'numpy.core.multiarray.scalar'),
        # timm-era official training checkpoints (LV-ViT, DeepViT, and the DeiT code of DiversePatch and
        # TL-Align) keep the command line as checkpoint['args'], an argparse.Namespace
        argparse.Namespace,
    ]


def unsafe_load_allowed() -> bool:
    """Whether the user opted into full unpickling (``MMVITREG_UNSAFE_LOAD=1``, set by ``--unsafe-load``)."""
    return os.environ.get(UNSAFE_LOAD_ENV, '') == '1'


def load_checkpoint(file, map_location=None, name: Optional[str] = None, unsafe: Optional[bool] = None):
    """``torch.load`` of a checkpoint, with ``weights_only=True`` and torch's allow-list, which holds
    :func:`checkpoint_safe_globals` (:mod:`mmvitreg.compat`'s ``checkpoint_weights_only``; before torch 2.6,
    :data:`TORCH_WEIGHTS_ONLY`, the file is unpickled as that torch does by default). The package's one unpickler.

    Args:
        file (str | file-like): what ``torch.load`` reads.
        map_location: as for ``torch.load``.
        name (str, optional): the file's name in messages. Defaults to ``file``.
        unsafe (bool, optional): unpickle anything (trusted files only). Defaults to
            :func:`unsafe_load_allowed`.

    Raises:
        UnsafeCheckpointError: the pickle names a global outside the allow-list (nothing of it ran).
    """
    if unsafe is None:
        unsafe = unsafe_load_allowed()
    if unsafe or not TORCH_WEIGHTS_ONLY:
        return torch.load(file, map_location=map_location, weights_only=False)
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if 'Weights only load failed' not in str(e) or 'Unsupported operand' in str(e):
            raise  # a damaged file or not a pickle (text read as one), not a refused one
        refused, other = _REFUSED_GLOBAL.search(str(e)), _WEIGHTS_ONLY_ERROR.search(str(e))
        what = (f'the global {refused.group(1)}' if refused else
                f'a pickle instruction ({other.group(1).rstrip(".")})' if other else 'a pickle instruction')
        raise UnsafeCheckpointError(
            f'checkpoint {name or file}: refused to unpickle {what}: it is not on mmvitreg\'s allow-list of what '
            'checkpoints hold, and unpickling it could run code; if you trust the file, pass --unsafe-load '
            f'(tools/train.py, tools/test.py, the converters) or set {UNSAFE_LOAD_ENV}=1') from None


#: what :func:`atomic_write` names its temporaries: ``.<final name>.<writer>.<random>.tmp``, the writer being
#: ``<host>-<pid namespace>-<pid>`` (:func:`_writer`), so that a process removes only the temporaries it can tell
#: are abandoned; ``.<final name>.<8 random>.tmp``: the names of mmvitreg before it, which say no writer
_TEMPORARY = re.compile(r'^\..+\.(?P<host>[A-Za-z0-9-]+)-(?P<namespace>\d+)-(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$')
_OLD_TEMPORARY = re.compile(r'^\..+\.[A-Za-z0-9_]{8}\.tmp$')
#: an old-format temporary (no writer in its name) unchanged for this long (seconds) is abandoned: a write in
#: progress changes its file far more often
OLD_TEMPORARY_AGE = 3600
#: this process's temporaries while :func:`atomic_write` writes them (none of them is stale)
_WRITING = set()


def _writer() -> Tuple[str, int, int]:
    """This process as a temporary's name says it: the host (letters, digits and ``-``), the inode of its pid
    namespace (two containers of one host name do not share their pids; 0 where ``/proc`` has none) and its pid."""
    host = re.sub(r'[^A-Za-z0-9-]', '-', socket.gethostname()) or 'host'
    try:
        namespace = os.stat('/proc/self/ns/pid').st_ino
    except OSError:
        namespace = 0
    return host, namespace, os.getpid()


def temporary_path(path: str, pid: Optional[int] = None) -> str:
    """The temporary :func:`atomic_write` fills for ``path`` (absolute), in its folder:
    ``.<name>.<host>-<pid namespace>-<pid>.<8 random hex digits>.tmp``; ``pid``: another process's of this host
    (default: this process's)."""
    host, namespace, own = _writer()
    folder, name = osp.split(osp.abspath(str(path)))
    return osp.join(folder, f'.{name}.{host}-{namespace}-{own if pid is None else pid}.{secrets.token_hex(4)}.tmp')


def atomic_write(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` atomically: ``write(f)`` fills a temporary file in the same folder (created with the mode
    ``open(path, 'wb')`` would give, as mmengine's writers do: the umask honoured), which is flushed to disk and
    ``os.replace``-d over ``path``; on any error the temporary is removed and the error raised. The temporary is
    named after its writer (:data:`_TEMPORARY`): a writer of few files (the checkpoint backend) removes what killed
    writes left with :func:`remove_stale_temporaries`, never what another live process is writing.

    Args:
        path (str): The final file; its folder is created.
        write (Callable): Writes the content to the binary file object it is given.
    """
    path = str(path)
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    tmp = temporary_path(path)
    _WRITING.add(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the mode open() gives: 0o666 less the umask
        try:
            with os.fdopen(fd, 'wb') as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if osp.exists(tmp):
                os.remove(tmp)
            raise
    finally:
        _WRITING.discard(tmp)


def _abandoned(folder: str, name: str) -> bool:
    """Whether the temporary ``name`` of ``folder`` is no write in progress: written on this host (and pid
    namespace) by this process, outside :func:`atomic_write`, or by a process that no longer exists; of the old
    format (no writer), unchanged for :data:`OLD_TEMPORARY_AGE` seconds. Another host's are never known to be."""
    match = _TEMPORARY.match(name)
    if match is None:
        try:
            return time.time() - os.stat(osp.join(folder, name)).st_mtime > OLD_TEMPORARY_AGE
        except FileNotFoundError:
            return False
    host, namespace, pid = _writer()
    if (match['host'], int(match['namespace'])) != (host, namespace):
        return False
    if int(match['pid']) == pid:
        return osp.join(folder, name) not in _WRITING
    try:
        os.kill(int(match['pid']), 0)  # signal 0: sent to no one, only whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists: another user's
        pass
    return False


def remove_stale_temporaries(folder: str) -> List[str]:
    """Remove the temporaries of :func:`atomic_write` calls that were killed before their ``os.replace``
    (:func:`_abandoned`: this process's own, a dead process's, an old-format one left for an hour) from ``folder``;
    returns their names. The temporaries of live writers (another run saving into the same work dir) stay."""
    if not osp.isdir(folder):
        return []
    folder = osp.abspath(folder)
    stale = sorted(name for name in os.listdir(folder)
                   if (_TEMPORARY.match(name) or _OLD_TEMPORARY.match(name)) and _abandoned(folder, name))
    for name in stale:
        try:
            os.remove(osp.join(folder, name))
        except FileNotFoundError:
            pass
    return stale
