"""Reading and writing files safely: :func:`open_regular_file` (the gate of every reader of untrusted files),
:func:`read_checkpoint` (torch's ``weights_only=True`` with, for that read only, the allow-list of what checkpoints
hold: torch's own list is never widened for the process) and :func:`atomic_write`. How checkpoints are loaded:
:mod:`mmvitreg.engine.checkpoint`.
"""

import argparse
import os
import os.path as osp
import pickle
import re
import secrets
import socket
import stat
import time
from contextlib import ExitStack, contextmanager, suppress
from typing import IO, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from packaging.version import Version

#: environment variable that lets :func:`load_checkpoint` unpickle anything (``--unsafe-load`` sets it)
UNSAFE_LOAD_ENV = 'MMVITREG_UNSAFE_LOAD'
#: the help of every tool's ``--unsafe-load`` flag
UNSAFE_LOAD_HELP = (
    f'unpickle checkpoints without the allow-list of what checkpoints hold (as {UNSAFE_LOAD_ENV}=1 '
    'does): a pickle can run code, so only for files you trust'
)
#: torch >= 2.6: ``weights_only=True`` by default, allow-list entries by name; an older torch unpickles everything by
#: default, and :func:`load_checkpoint` with it
TORCH_WEIGHTS_ONLY = Version(torch.__version__).release >= (2, 6)
_REFUSED_GLOBAL = re.compile(r'GLOBAL (\S+)')  # torch's wording varies ('Unsupported global: GLOBAL x.y', ...)
#: numpy dtype kinds a checkpoint's arrays and scalars may have: bool, signed / unsigned integer, float (fixed item
#: sizes; flexible ``S`` / ``U`` / ``V`` / ``O`` and the datetimes, whose state sets a unit, are refused)
NUMPY_KINDS = 'biuf'
_NUMPY_RECONSTRUCT = np.zeros(0).__reduce__()[0]  # numpy's array rebuild function, whatever module holds it
_NUMPY_SCALAR = np.float64(0).__reduce__()[0]  # numpy's scalar rebuild function


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message (one line) names the file and what is wrong."""


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint whose pickle needs more than :func:`checkpoint_safe_globals`; the message names
    the file, the offending global and the opt-in for trusted files."""


def _history_buffer_statistic(owner, name: str):
    """``getattr`` as mmengine's ``HistoryBuffer`` pickles use it (``getattr(HistoryBuffer, 'min')`` for the
    statistic methods in its state), and only that: ``builtins.getattr`` itself would hand the pickle any attribute
    of any allowed class."""
    if owner not in (HistoryBuffer, _CheckedHistoryBuffer) or name not in _statistics():
        raise pickle.UnpicklingError(f'getattr({owner!r}, {name!r}) is not a HistoryBuffer statistic')
    return getattr(HistoryBuffer, name)


def _statistics() -> dict:
    """HistoryBuffer's statistic methods by name (its defaults join its class table when one is built)."""
    return HistoryBuffer()._statistics_methods


def _numpy_dtype(*args) -> np.dtype:
    """``numpy.dtype(...)`` of a pickle, for the kinds of :data:`NUMPY_KINDS` only. numpy's ``__setstate__`` of
    these dtypes (the pickle's BUILD that follows) leaves their item size, byte order and fields as they are
    (``tests/test_checkpoint_fuzz.py`` checks every one); a flexible dtype's sets its item size."""
    dtype = np.dtype(*args)
    if dtype.kind not in NUMPY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise pickle.UnpicklingError(f'numpy dtype {dtype.str!r} is not one a checkpoint holds (kinds {NUMPY_KINDS})')
    return dtype


def _numpy_array_type(*args):
    """What the name ``numpy.ndarray`` stands for in a pickle: only :func:`_numpy_reconstruct`'s argument, never
    called (``numpy.ndarray(shape)`` hands out uninitialised memory)."""
    raise pickle.UnpicklingError('numpy.ndarray(...) is not called while unpickling a checkpoint')


def _numpy_reconstruct(subtype, shape, typecode) -> np.ndarray:
    """numpy's ``_reconstruct(numpy.ndarray, (0,), b'b')``: the empty array whose BUILD (``ndarray.__setstate__``)
    sets its dtype (one of :func:`_numpy_dtype`'s: numpy takes no other object there) and data, which numpy checks
    against the shape (``buffer size does not match array size``)."""
    if subtype is not _numpy_array_type or tuple(shape) != (0,) or typecode != b'b':
        raise pickle.UnpicklingError(f'numpy _reconstruct{(subtype, shape, typecode)!r} is not a plain array')
    return _NUMPY_RECONSTRUCT(np.ndarray, (0,), b'b')


def _numpy_scalar(dtype, data: bytes):
    """numpy's ``scalar(dtype, data)``: a scalar of a :func:`_numpy_dtype` kind from exactly its item size."""
    numeric = isinstance(dtype, np.dtype) and dtype.kind in NUMPY_KINDS
    if not (numeric and isinstance(data, bytes) and len(data) == dtype.itemsize):
        got = f'{len(data)} bytes' if isinstance(data, bytes) else f'a {type(data).__name__}'  # no crafted repr
        raise pickle.UnpicklingError(
            f'numpy scalar({dtype if numeric else type(dtype).__name__}, {got}) is not a number of a checkpoint dtype'
        )
    return _NUMPY_SCALAR(dtype, data)


class _StandIn:
    """A checked stand-in of a host class in a pickle, which rebuilds it by NEWOBJ (no arguments: an empty instance
    of the host) and BUILD (:meth:`check` the state, then the host's own): it becomes an instance of the host. One that
    no BUILD reached (a crafted file) stays an empty instance of the stand-in, which a save would write under the
    stand-in's name, refused by the next read. Calling the class is refused."""

    host: type

    def __new__(cls, *args):
        if args:
            raise pickle.UnpicklingError(f'{cls.host.__name__}.__new__ takes no arguments in a checkpoint')
        instance = cls.host.__new__(cls)
        cls.host.__init__(instance)
        return instance

    def __init__(self, *args, **kwargs):
        raise pickle.UnpicklingError(f'{self.host.__name__}(...) is not called while unpickling a checkpoint')

    def __setstate__(self, state):
        if not self.check(state):
            raise pickle.UnpicklingError(f'a {self.host.__name__} state that is not one a checkpoint holds')
        if hasattr(self.host, '__setstate__'):
            self.host.__setstate__(self, state)
        else:
            self.__dict__.update(state)
        self.__class__ = self.host


class _CheckedHistoryBuffer(_StandIn, HistoryBuffer):
    """mmengine's ``HistoryBuffer``, its state checked: ``max_length`` an int, both histories 1-D numeric arrays of
    one length, the statistic methods HistoryBuffer's own (its ``__setstate__`` writes them into the class's table,
    shared by the process)."""

    host = HistoryBuffer

    def check(self, state) -> bool:
        keys = {'max_length', '_log_history', '_count_history', 'statistics_methods'}
        if not (isinstance(state, dict) and set(state) <= keys):
            return False
        histories = [state.get(k) for k in ('_log_history', '_count_history')]
        methods = state.get('statistics_methods', {})
        return (
            type(state.get('max_length')) is int
            and isinstance(methods, dict)
            and all(isinstance(h, np.ndarray) and h.ndim == 1 and h.dtype.kind in NUMPY_KINDS for h in histories)
            and len({len(h) for h in histories}) == 1
            and all(_statistics().get(k) is v for k, v in methods.items())
        )


class _CheckedNamespace(_StandIn, argparse.Namespace):
    """``argparse.Namespace`` (a timm-era release's ``args``), its state a dict of names."""

    host = argparse.Namespace

    def check(self, state) -> bool:
        return isinstance(state, dict) and all(isinstance(k, str) for k in state)


def checkpoint_safe_globals() -> list:
    """The globals :func:`load_checkpoint` lets a checkpoint's pickle name, besides torch's own, as
    ``(checked stand-in, name)`` pairs where unpickling the original could change a buffer or a class: what the
    checkpoints of ``tools/train.py`` and the official releases hold (``tests/test_safe_loading.py`` loads them):
    mmengine's ``HistoryBuffer``, numpy arrays and scalars (``numpy.random.get_state()``, ``runtime_info['eta']``)
    and ``argparse.Namespace`` (timm-era releases' ``args``)."""
    dtype_classes = {type(np.dtype(c)) for c in np.typecodes['AllInteger'] + np.typecodes['Float'] + '?'}
    rebuilds = ((_numpy_reconstruct, '_reconstruct'), (_numpy_scalar, 'scalar'))
    numpy_names = [(f, f'numpy.{core}.multiarray.{name}') for core in ('_core', 'core') for f, name in rebuilds]
    return [
        (_CheckedHistoryBuffer, 'mmengine.logging.history_buffer.HistoryBuffer'),
        (_history_buffer_statistic, 'builtins.getattr'),
        (_numpy_dtype, 'numpy.dtype'),
        (_numpy_array_type, 'numpy.ndarray'),
        *numpy_names,
        # the BUILD of a dtype that _numpy_dtype returned: numpy leaves these dtypes as they are
        *sorted(dtype_classes, key=str),
        # the BUILD of the array _numpy_reconstruct returned (numpy checks it); no GLOBAL spells a line break, so no
        # pickle can name the class itself (numpy.ndarray is _numpy_array_type)
        (np.ndarray, 'numpy.ndarray\nBUILD only'),
        (_CheckedNamespace, 'argparse.Namespace'),
    ]


@contextmanager
def checkpoint_globals() -> Iterator[None]:
    """Inside it, torch's ``weights_only`` allow-list also holds :func:`checkpoint_safe_globals`; on leaving, torch's
    list is as it was (what was on it before stays). torch's list is one per process: a ``torch.load`` of another
    thread during the read sees them too."""
    present = set(torch.serialization.get_safe_globals())
    with torch.serialization.safe_globals([g for g in checkpoint_safe_globals() if g not in present]):
        yield


def load_checkpoint(file, map_location=None, name: Optional[str] = None, unsafe: Optional[bool] = None):
    """``torch.load(file, map_location)`` of a checkpoint, with ``weights_only=True`` and, for this read only, the
    allow-list of :func:`checkpoint_safe_globals` (before torch 2.6, :data:`TORCH_WEIGHTS_ONLY`, as that torch does
    by default); ``unsafe`` (default: ``MMVITREG_UNSAFE_LOAD=1``) unpickles anything. The package's one unpickler.

    Raises:
        UnsafeCheckpointError: the pickle names a global outside the allow-list or breaks one of its checks (nothing
            of it ran); the message calls the file ``name`` (default: ``file``).
    """
    if unsafe is None:
        unsafe = os.environ.get(UNSAFE_LOAD_ENV) == '1'
    if unsafe or not TORCH_WEIGHTS_ONLY:
        return torch.load(file, map_location=map_location, weights_only=False)
    try:
        with checkpoint_globals():
            return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if 'Weights only load failed' not in str(e) or 'Unsupported operand' in str(e):
            raise  # a damaged file or not a pickle (text read as one), not a refused one
        refused = _REFUSED_GLOBAL.search(str(e))
        what = f'the global {refused[1]}' if refused else f'a pickle instruction ({first_line(e)})'
        raise UnsafeCheckpointError(
            f'checkpoint {name or file}: refused to unpickle {what}: it is not on mmvitreg\'s allow-list of what '
            'checkpoints hold, and unpickling it could run code; if you trust the file, pass --unsafe-load '
            f'(tools/train.py, tools/test.py, the converters) or set {UNSAFE_LOAD_ENV}=1'
        ) from None


def first_line(e: BaseException) -> str:
    """``'<type>: <what e says>'`` on one line: its first sentence (for torch's weights-only refusal, the one after
    torch's advice), at most 300 characters."""
    text = ' '.join(str(e).split('WeightsUnpickler error:')[-1].split()).split('. ')[0][:300]
    return f'{type(e).__name__}: {text}' if text else type(e).__name__


def open_regular_file(path: str, name: str, bounds: Tuple[int, int], error: type, fix='', missing=None) -> IO[bytes]:
    """``path`` opened for reading once it is a regular file (a symlink to one is followed) of ``bounds[0]`` to
    ``bounds[1]`` bytes: a FIFO, a device (``/dev/zero``), a folder or a size out of bounds is refused before a
    byte is read. ``os.stat`` decides before the open, which does not block (a FIFO swapped in meanwhile), and the
    open descriptor is checked again. Each refusal is one ``error`` (``missing``, if given, for a missing file)
    ``'<name> <problem>; <fix>'``."""

    def refuse(problem: str, cls: type = error) -> Exception:
        return cls(f'{name} {problem}' + (f'; {fix}' if fix else ''))

    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise refuse('is not a regular file (a FIFO, a device, a socket or a folder, or a link to one)')
        if info.st_size == 0 < bounds[0]:
            raise refuse('is an empty file (0 bytes)')
        if not bounds[0] <= info.st_size <= bounds[1]:
            raise refuse(f'holds {info.st_size} bytes, outside the {bounds[0]}..{bounds[1]} it may hold')

    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise refuse('does not exist', missing or error) from None
    except OSError as e:  # a loop of links, no permission
        raise refuse(f'cannot be opened ({e.strerror})') from None
    f = os.fdopen(fd, 'rb')
    try:
        check(os.fstat(fd))
    except error:
        f.close()
        raise
    return f


def open_checkpoint(path: str, filename: str, error: type = CheckpointError) -> IO[bytes]:
    """``path`` (the local copy of ``filename``) opened by :func:`open_regular_file` as a checkpoint: a regular file
    of 1 byte to the machine's physical memory; each refusal is one ``error`` naming ``filename``. ``tools/test.py``
    runs it before the runner writes its work dir, :func:`read_checkpoint` to read."""
    memory = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    return open_regular_file(path, f'checkpoint {filename}', (1, memory), error)


def read_checkpoint(filename: str, map_location='cpu', unsafe: Optional[bool] = None) -> dict:
    """Step 1 of the loading pass: read ``filename``, local or remote (fetched by ``mmengine.fileio.get_local_path``),
    opened by :func:`open_checkpoint`, unpickled by :func:`load_checkpoint` (the allow-list unless ``unsafe`` or
    ``--unsafe-load``).

    Raises:
        CheckpointError: the file cannot be fetched, is not a regular file, is empty, too large, truncated, not a
            PyTorch checkpoint dict, or names a global outside the allow-list (one line naming the file).
    """
    from mmengine.fileio import get_local_path

    filename = str(filename)
    with ExitStack() as stack:
        try:  # a local path is itself
            path = stack.enter_context(get_local_path(filename))
        except Exception as e:  # no backend for the prefix, a network or permission error, ...
            raise CheckpointError(
                f"checkpoint {filename}: cannot be fetched through mmengine's file backends "
                f'({first_line(e)}); download it and give the local path'
            ) from None
        f = stack.enter_context(open_checkpoint(path, filename))
        try:
            checkpoint = load_checkpoint(f, map_location, name=filename, unsafe=unsafe)
        except UnsafeCheckpointError as e:  # its message names the file, the global and the opt-in
            raise CheckpointError(str(e)) from None
        except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
            raise CheckpointError(
                f'checkpoint {filename}: not a readable PyTorch checkpoint '
                f'({os.fstat(f.fileno()).st_size} bytes; truncated or another format): '
                f'{first_line(e)}'
            ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(
            f'checkpoint {filename}: holds a {type(checkpoint).__name__}, not a checkpoint '
            '(a dict with a state_dict, or a state dict)'
        )
    return checkpoint


#: :func:`atomic_write`'s temporaries, ``.<final name>.<host>-<pid namespace>-<pid>.<random>.tmp``: a process removes
#: only those it can tell are abandoned; ``_ANY_TEMPORARY`` also matches those of mmvitreg before, which name no writer
_TEMPORARY = re.compile(r'^\..+\.(?P<host>[A-Za-z0-9-]+)-(?P<namespace>\d+)-(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$')
_ANY_TEMPORARY = re.compile(r'^\..+\.[A-Za-z0-9_]{8}\.tmp$')
#: an old-format temporary unchanged for this long (seconds) is abandoned: a write in progress changes it more often
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
    """The temporary :func:`atomic_write` fills for ``path`` (:data:`_TEMPORARY`), written by ``pid`` of this host
    (default: this process)."""
    host, namespace, own = _writer()
    folder, name = osp.split(osp.abspath(str(path)))
    return osp.join(folder, f'.{name}.{host}-{namespace}-{own if pid is None else pid}.{secrets.token_hex(4)}.tmp')


def atomic_write(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` (its folder created) atomically: ``write(f)`` fills a binary temporary in the same folder
    (:func:`temporary_path`, the mode ``open(path, 'wb')`` gives), which is flushed to disk and ``os.replace``-d over
    ``path``; on any error the temporary is removed and the error raised."""
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
    """Whether the temporary ``name`` of ``folder`` is no write in progress: this process's outside
    :func:`atomic_write`, a dead process's of this host and pid namespace, an old-format one unchanged for
    :data:`OLD_TEMPORARY_AGE` seconds."""
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
    """Remove the temporaries that killed :func:`atomic_write` calls left in ``folder`` (:func:`_abandoned`); returns
    their names. Those of live writers (another run saving into the same work dir) stay."""
    if not osp.isdir(folder):
        return []
    folder = osp.abspath(folder)
    stale = sorted(name for name in os.listdir(folder) if _ANY_TEMPORARY.match(name) and _abandoned(folder, name))
    for name in stale:
        with suppress(FileNotFoundError):  # another process removed it meanwhile
            os.remove(osp.join(folder, name))
    return stale
