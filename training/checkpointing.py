"""Atomic checkpoints with keep-last-K, and finding the one to resume from.

A checkpoint is `OUTPUT/checkpoints/checkpoint-STEP/`: Accelerate's `save_state` (model,
optimiser, scheduler, grad scaler, every process's RNG states) plus `trainer_state.json` (global
step, phase, step within the phase, early-stopping state, tokens seen, wall time). It is written
to `.tmp-checkpoint-STEP/` first and renamed into place only when complete (a directory rename
is atomic on POSIX file systems), so a crash while saving leaves the previous checkpoints intact
and the half-written folder is ignored (and removed by the next save). A save that fails with an
error removes its half-written folder at once; when the device is full, the error becomes
`DiskFull`, one line saying how much space is free and what to change.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

STATE_FILE = "trainer_state.json"
LOCK_FILE = ".lock"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoints_dir(output_dir) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first."""
    root = checkpoints_dir(output_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(output_dir) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (a file that does not load), or None. Every state file is
    read the way Accelerate reads it on resume (`accelerate.utils.load`: tensors and plain data only, no
    pickled code), so a truncated file or a planted pickle is found here, before anything is trained,
    instead of failing halfway or being skipped silently (Accelerate ignores unreadable RNG states)."""
    from accelerate.utils import load

    checkpoint = Path(checkpoint)
    try:
        state = read_state(checkpoint)
    except (OSError, ValueError) as error:
        return f"{STATE_FILE}: {type(error).__name__}"
    processes = state.get("num_processes") or 1
    needed = ["optimizer.bin", "scheduler.bin", *(f"random_states_{rank}.pkl" for rank in range(processes))]
    missing = [name for name in needed if not (checkpoint / name).is_file()]
    if not any((checkpoint / name).is_file() for name in ("pytorch_model.bin", "model.safetensors")):
        missing.insert(0, "pytorch_model.bin")
    if missing:
        return f"{', '.join(missing)} missing"
    for path in sorted(checkpoint.iterdir()):
        if path.suffix in (".bin", ".pkl", ".pt"):
            try:
                load(path, map_location="cpu")
            except Exception as error:  # any failure to read means: do not resume from here
                first = (str(error).strip().splitlines() or [""])[0][:120]
                return f"{path.name} does not load ({type(error).__name__}: {first})"
    return None


def latest_usable_checkpoint(output_dir, log=print) -> Path | None:
    """The newest checkpoint that loads; each newer one that does not is named with the reason."""
    for _, path in reversed(list_checkpoints(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        log(f"warning: skipping {path.name}: {problem}")
    return None


def read_state(checkpoint: Path) -> dict:
    return json.loads((Path(checkpoint) / STATE_FILE).read_text())


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(folder: Path) -> None:
    """fsync every file and folder under `folder`, and `folder`: after a power loss or a kernel crash, a
    checkpoint marked complete is whole (hand-written: Accelerate's `save_state` does not sync)."""
    for path in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):  # files and subfolders before their parent
        _fsync(path)
    _fsync(folder)


class DiskFull(RuntimeError):
    """The device ran out of space while a checkpoint was written (its partial folder is removed)."""


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _out_of_space(error: BaseException, free: int, needed: int) -> bool:
    """ENOSPC/EDQUOT anywhere in the error's chain, or less space free than a checkpoint takes: torch's
    zip writer reports a short write as "unexpected pos" without the OS error, so the space is checked too."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__cause__ or error.__context__
    return free < needed


def _discard_partial(error: BaseException, output_dir, tmp: Path, final: Path, keep: int) -> None:
    """Remove the half-written checkpoint `tmp`; raise `DiskFull` from `error` when the device is full."""
    root = tmp.parent
    free_then = shutil.disk_usage(root).free
    previous = list_checkpoints(output_dir)
    needed = max(_folder_bytes(tmp) if tmp.exists() else 0, _folder_bytes(previous[-1][1]) if previous else 0)
    shutil.rmtree(tmp, ignore_errors=True)
    if not isinstance(error, Exception) or not _out_of_space(error, free_then, needed):
        return
    mib = 2 ** 20
    kept = f"{previous[-1][1].name} is intact" if previous else "no earlier checkpoint exists"
    raise DiskFull(f"no space left on the device to write {final.name} in {root} "
                   f"({shutil.disk_usage(root).free / mib:.1f} MiB free, a checkpoint takes about {needed / mib:.1f} "
                   f"MiB); the partial checkpoint was removed and {kept}: free space there, or lower "
                   f"save_total_limit (now {keep}) or raise save_steps, then continue with --resume latest") from error


def resume_advice(output_dir) -> str:
    """How to go on with a run that stopped before its end: from its newest complete checkpoint, if any."""
    done = list_checkpoints(output_dir)
    return (f"continue with --resume latest (from {done[-1][1].name}, which is complete)" if done else
            "run it again (no checkpoint was written yet)")


def out_of_space_advice(error: OSError, output_dir) -> str:
    """One line for a full disk outside a checkpoint (the loss log, the model folder): what to do, and
    whether a checkpoint is there to continue from."""
    return f"no space left on the device writing {error.filename or output_dir}: free space there and " \
           f"{resume_advice(output_dir)}"


def save_checkpoint(accelerator, output_dir, step: int, state: dict, keep: int, save_state=None,
                    spare_slot: bool = False) -> Path:
    """Collective: every process calls it. `save_state(dir)` defaults to `accelerator.save_state`.
    `keep`: save_total_limit; `spare_slot`: this checkpoint (the run's end, off the save cadence) is kept
    beside those `keep`, not in place of the oldest. Raises `DiskFull` when the device fills up; the previous
    checkpoints are kept either way."""
    root = checkpoints_dir(output_dir)
    tmp = root / f".tmp-checkpoint-{step}"
    final = root / f"checkpoint-{step}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    try:
        (save_state or (lambda d: accelerator.save_state(str(d), safe_serialization=False)))(tmp)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            _sync_tree(tmp)
            _write_json(tmp / STATE_FILE, state)  # written last: its presence marks a complete checkpoint
    except BaseException as error:
        _discard_partial(error, output_dir, tmp, final, keep)
        raise
    if accelerator.is_main_process:
        replaced = root / f".tmp-{final.name}-replaced"  # a later timeline's checkpoint of this step: set aside
        if final.exists():  # first, so that a crash in between leaves it, or this one, whole
            shutil.rmtree(replaced, ignore_errors=True)
            os.replace(final, replaced)
        os.replace(tmp, final)
        _fsync(root)  # the rename on disk before any older checkpoint is pruned
        shutil.rmtree(replaced, ignore_errors=True)
        # Pruned: the oldest beyond `keep` up to this step, and every later one (left by a timeline this resumed
        # run replaces: `--resume latest` must never go back to it). Renamed out of the list first, so a crash
        # while deleting leaves no half-deleted folder that counts as a checkpoint.
        done = list_checkpoints(output_dir)
        earlier = [path for number, path in done if number <= step]
        for old in earlier[:-(keep + spare_slot)] + [path for number, path in done if number > step]:
            doomed = root / f".tmp-{old.name}-pruned"
            shutil.rmtree(doomed, ignore_errors=True)
            os.replace(old, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        for stale in root.glob(".tmp-checkpoint-*"):
            shutil.rmtree(stale, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


class FolderInUse(RuntimeError):
    """Another live process holds the folder's lock."""


# The lock files this process holds. A forked child (a loader worker) shares their open file, and with it the lock:
# after kill -9 of the run it kept the folder locked until it noticed its parent's end (about 5 s). It closes its
# copies as it starts; the parent's lock stays, since a `flock` holds while any descriptor of the file is open.
_HELD_LOCKS: set = set()


def _close_held_locks_in_child() -> None:
    for handle in list(_HELD_LOCKS):
        try:
            handle.close()
        except OSError:
            pass
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_locks_in_child)


@contextmanager
def folder_lock(folder, enabled: bool = True, wait: bool = False):
    """Hold `folder/.lock` while a run writes into `folder`; a second run on the same folder fails at
    once. An OS lock (`flock`), not a marker file: the kernel releases it when the holder exits, however
    it exits, so a crashed or killed run never leaves the folder locked. Hand-written because neither
    Accelerate nor the Hub libraries guard an output folder. `wait`: wait for the holder to end instead of
    failing. No-op where `fcntl` does not exist (Windows)."""
    try:
        import fcntl
    except ImportError:
        enabled = False
    if not enabled:
        yield
        return
    folder = Path(folder)
    created = not folder.exists()
    path = folder / LOCK_FILE
    while True:
        folder.mkdir(parents=True, exist_ok=True)  # again after a holder that created it removed it as it ended
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise FolderInUse(f"{folder} is in use by {holder}; wait for that run to end, or choose another "
                              "output folder") from None
        try:  # the holder before removes the file as it ends: a lock on that removed file guards nothing
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}")
    handle.flush()
    _HELD_LOCKS.add(handle)
    try:
        yield
    finally:
        _HELD_LOCKS.discard(handle)
        path.unlink(missing_ok=True)
        handle.close()
        if created:  # a run that failed before writing anything leaves no folder behind
            try:
                folder.rmdir()
            except OSError:
                pass
