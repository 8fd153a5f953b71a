"""Post-training checkpoints and resume (training/checkpointing.py): a run killed mid-training and resumed
matches the uninterrupted run bit for bit (with dropout and data workers too); a torn loss log is
tolerated and a checkpoint that does not load is skipped; saving is atomic; a full disk is one line,
keeps the last checkpoint and resumes exactly; an output folder in use is refused; a finished run's
folder is guarded, resumed as finished, or overwritten on request.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.model_factories import tiny_source, word_tokenizer
from tests.post_train_helpers import (PYTHON, WORDS, checkpoint_weights, losses, reset_accelerate, run_args,
                                      run_inprocess, run_killed_after, run_subprocess)
from training import post_train
from training.checkpointing import LOCK_FILE, latest_checkpoint, list_checkpoints, save_checkpoint
from training.run_record import GENERATED_CARD_MARKER

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


class OneProcess:
    """What save_checkpoint needs of an Accelerator in a run of one process."""
    is_main_process = True

    def wait_for_everyone(self):
        pass


def test_kill_mid_phase2_then_resume_matches_uninterrupted_run(tiny, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(7, run_args(tiny, cut, **common))  # in phase 2
    assert not (cut / "training_summary.json").exists()
    assert [s for s, _ in list_checkpoints(cut)] == [4, 6]  # step 4, the end of phase 1, with phase 2's optimiser
    proc = run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert "resuming from" in proc.stdout + proc.stderr and "checkpoint-6" in proc.stdout + proc.stderr
    assert losses(cut) == losses(full)  # loss and lr of every step, bit for bit
    a = json.loads((full / "training_summary.json").read_text())
    b = json.loads((cut / "training_summary.json").read_text())
    assert a["final_metrics"] == b["final_metrics"] and a["tokens_seen"] == b["tokens_seen"]
    assert [p["steps"] for p in b["phases"]] == [4, 6] and b["resumed"]


@pytest.mark.parametrize("stop_after,num_workers", [(7, 0), (3, 2), (5, 0)],
                         ids=["phase2-in-process", "phase1-workers", "from-the-phase-boundary"])
def test_resume_with_dropout_on_matches_uninterrupted_run(tiny, tmp_path, stop_after, num_workers):
    """Dropout draws from torch's global generator: nothing else on the resume path may draw from it.
    Stopping at step 3 resumes from checkpoint 2 and crosses the phase boundary (step 4) after resuming;
    stopping at step 5 resumes from the checkpoint of the boundary itself."""
    source = tmp_path / "source"
    tiny_source("bert", word_tokenizer("bert", WORDS), source, dropout=0.1)
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(source=source, train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2,
                  num_workers=num_workers)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(stop_after, run_args(tiny, cut, **common))
    proc = run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert f"checkpoint-{stop_after - stop_after % 2}" in proc.stdout + proc.stderr
    assert losses(cut) == losses(full)
    a = checkpoint_weights(latest_checkpoint(full))
    b = checkpoint_weights(latest_checkpoint(cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_output_dir_guard_resume_of_finished_run_and_checkpoint_cleanup(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    first = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1, keep_checkpoints="false"))
    assert not (out / "checkpoints").exists()  # optimiser states are dropped after success
    reset_accelerate()
    assert post_train.main(run_args(tiny, out, train_steps=3, phase1_steps=1)) == 2  # would mix two runs
    err = capsys.readouterr().err
    assert "`output_dir`" in err and "holds a finished run" in err and "--resume latest" not in err
    reset_accelerate()
    again = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1) + ["--resume", "latest"])
    assert again == first  # finished: nothing to resume
    reset_accelerate()  # a finished run cannot be extended by resuming it with more steps
    assert post_train.main(run_args(tiny, out, train_steps=5, phase1_steps=1) + ["--resume", "latest"]) == 2
    err = capsys.readouterr().err
    assert "holds a run finished with other settings (train_steps 3 -> 5)" in err
    reset_accelerate()
    (out / "learning_curve.json").write_text("{}")  # probes of the run about to be replaced: go with it
    (out / "card_options.json").write_text('{"results": ["old_results.json"]}')  # and its card, with the options
    (out / "README.md").write_text(f"---\nbase_model: org/old\n---\n{GENERATED_CARD_MARKER}\nthe old run\n")
    third = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1, overwrite_output_dir="true"))
    assert losses(out)[-1]["step"] == 3 and third["final_metrics"] == first["final_metrics"]
    assert not any((out / name).exists() for name in ("learning_curve.json", "card_options.json", "README.md"))
    reset_accelerate()  # a card the user wrote by hand is theirs: kept
    (out / "README.md").write_text("# my notes\n")
    run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1, overwrite_output_dir="true"))
    assert (out / "README.md").read_text() == "# my notes\n"


def test_a_folder_in_use_is_refused_and_a_killed_holder_frees_it(tiny, tmp_path, capsys):
    from training.checkpointing import folder_lock

    out = tmp_path / "run"
    with folder_lock(out):
        assert post_train.main(run_args(tiny, out)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"is in use by process {os.getpid()}" in err[0], err
    assert not out.exists()  # the refused run wrote nothing, and the holder left no folder behind
    holder = subprocess.Popen([PYTHON, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from training.checkpointing import folder_lock\n"
                               "with folder_lock(sys.argv[2]):\n    print('held', flush=True); time.sleep(600)",
                               str(REPO_ROOT), str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert post_train.main(run_args(tiny, out)) == 2
        assert f"in use by process {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()  # SIGKILL: no clean-up code runs in the holder
        holder.wait()
    assert (out / ".lock").exists()  # the killed holder's file is still there, but its lock died with it
    summary = run_inprocess(run_args(tiny, out, train_steps=2, phase1_steps=1))
    assert summary["total_steps"] == 2 and not (out / ".lock").exists()


def open_files(pid: int) -> set[str]:
    """The files process `pid` holds open (Linux /proc)."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.path.realpath(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return found


def test_a_killed_holder_frees_its_folder_even_while_its_forked_workers_live_on(tmp_path):
    """Loader workers are forked children: they inherited the lock's descriptor and, after kill -9 of the run,
    kept the folder "in use by" the dead process until they noticed (about 5 s). A forked child holds no lock."""
    import signal

    from training.checkpointing import folder_lock

    out = tmp_path / "run"
    holder = subprocess.Popen([PYTHON, "-c", "import multiprocessing, sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from training.checkpointing import folder_lock\n"
                               "with folder_lock(sys.argv[2]):\n"
                               "    worker = multiprocessing.get_context('fork').Process(target=time.sleep, args=(600,))\n"
                               "    worker.start()\n"
                               "    print('held', worker.pid, flush=True); time.sleep(600)",
                               str(REPO_ROOT), str(out)], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        said, worker = holder.stdout.readline().split()
        assert said == "held"
        # the worker closes its copy as it starts, after `start` has returned in the holder: wait for that (10 s at
        # most; before the fix it kept the copy for its whole life)
        lock, deadline = str((out / LOCK_FILE).resolve()), time.monotonic() + 10
        while lock in open_files(int(worker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        holder.kill()  # SIGKILL, as kill -9: its forked worker lives on
        holder.wait()
        os.kill(int(worker), 0)  # still running
        with folder_lock(out):
            pass
    finally:
        holder.kill()
        holder.wait()
        if worker is not None:
            os.kill(int(worker), signal.SIGKILL)


def test_a_waiting_lock_is_taken_when_its_holder_ends(tmp_path):
    """`wait=True` (the study report's writers) queues behind the holder instead of refusing."""
    import threading

    from training.checkpointing import folder_lock

    folder, taken = tmp_path / "report", threading.Event()

    def second():
        with folder_lock(folder, wait=True):
            taken.set()

    with folder_lock(folder):
        waiter = threading.Thread(target=second)
        waiter.start()
        assert not taken.wait(0.5)  # still held
    waiter.join(10)
    assert taken.is_set()


def test_a_lock_taken_on_a_lock_file_its_holder_just_removed_is_taken_again(tmp_path, monkeypatch):
    """A holder removes `.lock` as it ends. A run that opened the file just before and locks it just after
    holds a lock on a removed file, which guards nothing: a third run may already hold the new `.lock`.
    The lock is taken again on the file in place, and the third run's hold is seen."""
    import fcntl

    from training import checkpointing

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock").write_text("")
    real_flock, third = fcntl.flock, []

    def holder_ends_then_a_third_run_locks(handle, operation):
        if not third:  # between this run's open and its flock: the old holder removes the file as it ends ...
            (folder / ".lock").unlink()
            other = open(folder / ".lock", "a+", encoding="utf-8")  # ... and a third run takes the new one
            real_flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            other.write("process 4242")
            other.flush()
            third.append(other)
        return real_flock(handle, operation)

    monkeypatch.setattr(fcntl, "flock", holder_ends_then_a_third_run_locks)
    try:
        with pytest.raises(checkpointing.FolderInUse, match="in use by process 4242"):
            with checkpointing.folder_lock(folder):
                pass
    finally:
        third[0].close()


def test_a_checkpoint_is_on_disk_before_it_is_marked_complete(tmp_path, monkeypatch):
    """Every file and folder of a checkpoint is synced before its state file marks it complete, and the
    folder holding the checkpoints after the rename, before older ones are pruned."""

    synced, real_fsync = [], os.fsync

    def record(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    def save_state(folder):
        (folder / "sub").mkdir(parents=True)
        (folder / "model.bin").write_bytes(b"w" * 10)
        (folder / "sub" / "rng.pkl").write_bytes(b"r")

    monkeypatch.setattr(os, "fsync", record)
    final = save_checkpoint(OneProcess(), tmp_path, 7, {"step": 7}, keep=2, save_state=save_state)
    tmp = str(tmp_path / "checkpoints" / ".tmp-checkpoint-7")
    state = synced.index(tmp + "/trainer_state.json")
    assert {tmp + "/model.bin", tmp + "/sub/rng.pkl", tmp + "/sub", tmp} <= set(synced[:state])
    assert synced[state + 1:] == [str(tmp_path / "checkpoints")] and (final / "trainer_state.json").is_file()


def test_tensorboard_curves_hold_each_step_once_after_a_resume_and_an_overwrite(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cut = tmp_path / "cut"
    common = dict(train_steps=8, phase1_steps=4, save_steps=2, save_total_limit=10, report_to="tensorboard")

    def logged_steps():
        curves = EventAccumulator(str(cut / "tensorboard"))
        curves.Reload()
        return [event.step for event in curves.Scalars("train/loss")]

    run_killed_after(5, run_args(tiny, cut, **common))  # steps 1-5 logged, the last checkpoint at 4
    run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert logged_steps() == list(range(1, 9))
    run_subprocess(run_args(tiny, cut, **common) + ["--overwrite-output-dir", "true"])
    assert logged_steps() == list(range(1, 9))
    shutil.rmtree(cut)
    run_killed_after(1, run_args(tiny, cut, **common))  # dies before its first checkpoint: started afresh
    run_subprocess(run_args(tiny, cut, **common))
    assert logged_steps() == list(range(1, 9))


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PAYLOAD_RAN",))


@pytest.mark.parametrize("damage", ["torn loss line", "truncated weights", "planted pickle"])
def test_resume_survives_a_torn_log_and_skips_a_checkpoint_that_does_not_load(tiny, tmp_path, damage):
    import pickle

    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(7, run_args(tiny, cut, **common))
    latest = latest_checkpoint(cut)
    assert latest.name == "checkpoint-6"
    with open(cut / "losses.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 8, "phase": "pha')  # the crash cut this line short
    if damage == "truncated weights":
        weights = latest / "pytorch_model.bin"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "planted pickle":
        (latest / "random_states_0.pkl").write_bytes(pickle.dumps(_Payload()))
    proc = run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    said = proc.stdout + proc.stderr
    if damage == "torn loss line":
        assert "checkpoint-6" in said and "skipping" not in said
    else:
        culprit = "pytorch_model.bin" if damage == "truncated weights" else "random_states_0.pkl"
        assert f"skipping checkpoint-6: {culprit} does not load" in said, said[-2000:]
        assert "resuming from the newest checkpoint that loads: checkpoint-4" in said
    assert not (REPO_ROOT / "PAYLOAD_RAN").exists() and not (cut / "PAYLOAD_RAN").exists()
    assert losses(cut) == losses(full)  # resumed exactly, from whichever checkpoint it used


def test_checkpoint_is_atomic_when_saving_crashes(tmp_path, monkeypatch):
    def good(path):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text("ok")

    def crashing(path):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text("half")
        raise OSError("disk full")

    acc = OneProcess()
    for step in (2, 4, 6):
        save_checkpoint(acc, tmp_path, step, {"step": step}, keep=2, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 6]
    with pytest.raises(OSError):  # not a full disk: the error itself goes on, the half-written folder does not
        save_checkpoint(acc, tmp_path, 8, {"step": 8}, keep=2, save_state=crashing)
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    assert latest_checkpoint(tmp_path).name == "checkpoint-6"
    assert (latest_checkpoint(tmp_path) / "weights").read_text() == "ok"
    save_checkpoint(acc, tmp_path, 8, {"step": 8}, keep=2, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [6, 8]
    # a run resumed from step 6 (say 8 did not load) saves step 7 with one kept: 7 stays, the abandoned 8 goes
    save_checkpoint(acc, tmp_path, 7, {"step": 7}, keep=1, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [7] and not list((tmp_path / "checkpoints").glob(".tmp-*"))
    # saving over an existing checkpoint of the same step: a crash between the two renames keeps the old one whole
    from training.checkpointing import STATE_FILE

    renames, real_replace = [], os.replace

    def replace_then_crash(src, dst):
        renames.append(Path(src).name)
        if Path(src).name == ".tmp-checkpoint-7":
            raise OSError("killed")
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", replace_then_crash)
        with pytest.raises(OSError, match="killed"):
            save_checkpoint(acc, tmp_path, 7, {"step": 7}, keep=1, save_state=good)
    assert renames == ["checkpoint-7", ".tmp-checkpoint-7"]
    aside = tmp_path / "checkpoints" / ".tmp-checkpoint-7-replaced"
    assert (aside / "weights").read_text() == "ok" and (aside / STATE_FILE).exists()  # nothing half-deleted
    save_checkpoint(acc, tmp_path, 7, {"step": 7}, keep=1, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [7] and not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_the_run_end_checkpoint_keeps_a_spare_slot_and_a_full_disk_names_the_limit_as_set(tmp_path):
    import errno

    from training.checkpointing import DiskFull

    def good(path):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text("ok")

    def full(path):
        good(path)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for step in (4, 8):
        save_checkpoint(OneProcess(), tmp_path, step, {"step": step}, keep=2, save_state=good)
    save_checkpoint(OneProcess(), tmp_path, 10, {"step": 10}, keep=2, save_state=good, spare_slot=True)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 8, 10]  # the limit's two, and the run's end beside them
    with pytest.raises(DiskFull, match=r"save_total_limit \(now 2\)"):  # the setting, not the spare slot
        save_checkpoint(OneProcess(), tmp_path, 11, {"step": 11}, keep=2, save_state=full, spare_slot=True)


def test_a_checkpoint_missing_a_state_file_is_not_resumed_from(tmp_path):
    from training.checkpointing import checkpoint_problem

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"step": 4, "num_processes": 2}))
    for name in ("pytorch_model.bin", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"):
        torch.save({"x": torch.zeros(2)}, folder / name)
    assert checkpoint_problem(folder) == "random_states_1.pkl missing"  # Accelerate would resume with fresh RNGs
    torch.save({"x": torch.zeros(2)}, folder / "random_states_1.pkl")
    assert checkpoint_problem(folder) is None
    (folder / "optimizer.bin").unlink()
    assert checkpoint_problem(folder) == "optimizer.bin missing"


def _fill_disk_while_saving(monkeypatch, checkpoint: str, file: str):
    """From now on, `torch.save` (what Accelerate's save_state writes every file with) of `file` into the
    temporary folder of `checkpoint` writes half of its bytes and fails as a full device does."""
    import errno
    import io

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if Path(f).parent.name == f".tmp-{checkpoint}" and Path(f).name == file:
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            Path(f).write_bytes(buffer.getvalue()[: buffer.tell() // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def test_disk_full_while_saving_a_checkpoint_is_one_line_and_resume_continues_exactly(tiny, tmp_path, capsys,
                                                                                        monkeypatch):
    from training.checkpointing import checkpoint_problem

    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_inprocess(run_args(tiny, full, **common))
    reset_accelerate()
    with monkeypatch.context() as patch:
        _fill_disk_while_saving(patch, "checkpoint-6", "optimizer.bin")
        assert post_train.main(run_args(tiny, cut, **common)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # besides progress bars
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("error: no space left") and f"checkpoint-6 in {cut / 'checkpoints'}" in errors[0]
    assert "MiB free" in errors[0] and "save_total_limit" in errors[0] and "save_steps" in errors[0], errors[0]
    assert not list((cut / "checkpoints").glob(".tmp-*"))  # the partial checkpoint is gone
    assert [s for s, _ in list_checkpoints(cut)] == [2, 4]
    assert checkpoint_problem(latest_checkpoint(cut)) is None
    assert losses(cut) == losses(full)[:6]
    reset_accelerate()
    run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)
    a = checkpoint_weights(latest_checkpoint(full))
    b = checkpoint_weights(latest_checkpoint(cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_ctrl_c_is_one_line_naming_the_checkpoint_to_resume_from_and_the_resume_is_exact(tiny, tmp_path, capsys,
                                                                                         monkeypatch):
    full, cut, early = tmp_path / "full", tmp_path / "cut", tmp_path / "early"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_inprocess(run_args(tiny, full, **common))
    real_save = post_train.save_checkpoint

    def ctrl_c_at(interrupted_step):
        def save(accelerator, output_dir, step, *args, **kwargs):
            if step == interrupted_step:
                raise KeyboardInterrupt
            return real_save(accelerator, output_dir, step, *args, **kwargs)
        return save

    for out, step, said in ((cut, 6, "continue with --resume latest (from checkpoint-4, which is complete)"),
                            (early, 2, "run it again (no checkpoint was written yet)")):
        reset_accelerate()
        capsys.readouterr()
        with monkeypatch.context() as patch:
            patch.setattr(post_train, "save_checkpoint", ctrl_c_at(step))
            assert post_train.main(run_args(tiny, out, **common)) == 130
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if "interrupted" in line] == [f"interrupted: {said}"]
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    reset_accelerate()
    run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)


def _fill_disk_at_the_model_folder(patch):
    """The model folder's write fails as on a full disk (ENOSPC), after every training step is done."""
    import errno

    def full_disk(model, tokenizer, folder, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "model.safetensors"))

    patch.setattr(post_train, "save_model_folder", full_disk)


def test_a_full_disk_while_writing_the_model_folder_is_one_line_and_resume_only_writes_it(tiny, tmp_path, capsys,
                                                                                           monkeypatch):
    """The run's last step is checkpointed before the final evaluation and the model folder: a failure
    there (here a full disk) costs no steps, and the resume starts from that checkpoint."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=4, save_total_limit=2)
    run_inprocess(run_args(tiny, full, **common))
    reset_accelerate()

    with monkeypatch.context() as patch:
        _fill_disk_at_the_model_folder(patch)
        assert post_train.main(run_args(tiny, cut, **common)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"error: no space left on the device writing {cut / 'model.safetensors'}")
    assert "--resume latest" in errors[0]
    assert [s for s, _ in list_checkpoints(cut)] == [4, 8, 10]  # the cadence, and the run's last step in a slot of its own
    reset_accelerate()
    run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert f"resuming from {cut / 'checkpoints' / 'checkpoint-10'}" in capsys.readouterr().out
    assert losses(cut) == losses(full)
    a = json.loads((full / "training_summary.json").read_text())
    b = json.loads((cut / "training_summary.json").read_text())
    assert a["final_metrics"] == b["final_metrics"] and [p["steps"] for p in b["phases"]] == [4, 6]
    assert [s for s, _ in list_checkpoints(cut)] == [4, 8]  # the run's end, off the cadence, gone with the outputs


def test_a_full_disk_in_safetensors_while_writing_the_weights_is_one_line_and_leaves_no_half_model(
        tiny, tmp_path, capsys, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError ("... (os error 28)"), not an OSError: once a
    traceback, with config.json and the code left in the folder and no weights. Now the one line of a full disk,
    no file of the model folder left, and the resume writes it."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=4, save_total_limit=2)
    run_inprocess(run_args(tiny, full, **common))
    reset_accelerate()

    def full_disk(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 64)  # what was written before the device filled up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with monkeypatch.context() as patch:
        patch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
        assert post_train.main(run_args(tiny, cut, **common)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"error: no space left on the device writing {cut / 'model.safetensors'}")
    assert "--resume latest (from checkpoint-10" in errors[0], errors[0]
    model_files = {"config.json", "configuration_xpt.py", "modeling_xpt.py", "model.safetensors", "tokenizer.json",
                   "tokenizer_config.json", "training_summary.json"}
    assert not model_files & {p.name for p in cut.iterdir()}, sorted(p.name for p in cut.iterdir())
    assert not [p for p in cut.iterdir() if p.name.startswith(".tmp")]
    reset_accelerate()
    run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    a = json.loads((full / "training_summary.json").read_text())
    b = json.loads((cut / "training_summary.json").read_text())
    assert a["final_metrics"] == b["final_metrics"] and (cut / "model.safetensors").is_file()


def test_a_run_whose_last_phase_stops_early_is_checkpointed_where_it_stopped(tiny, tmp_path, capsys, monkeypatch):
    """Early stopping ends the last phase before its planned steps: that step is checkpointed too, and a
    resume from it trains no further (the phase stays stopped) and writes the same outputs."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=16, phase1_steps=2, save_steps=5, eval_steps=1, early_stopping_patience=1,
                  learning_rate=3e-2, save_total_limit=2, mixed_precision="no")  # the step it stops at: fp32 everywhere
    a = run_inprocess(run_args(tiny, full, **common))
    assert a["phases"][-1]["stopped_early"] and a["total_steps"] < 16 and a["total_steps"] % 5  # stopped off the cadence
    reset_accelerate()

    with monkeypatch.context() as patch:
        _fill_disk_at_the_model_folder(patch)
        assert post_train.main(run_args(tiny, cut, **common)) == 2
    assert list_checkpoints(cut)[-1][0] == a["total_steps"]
    assert f"from checkpoint-{a['total_steps']}, which is complete" in capsys.readouterr().err
    reset_accelerate()
    b = run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full) and b["final_metrics"] == a["final_metrics"]
    assert [(p["steps"], p["stopped_early"]) for p in b["phases"]] == [(p["steps"], p["stopped_early"]) for p in a["phases"]]
    assert a["total_steps"] not in [s for s, _ in list_checkpoints(cut)]  # off the cadence: gone once the outputs are


@pytest.fixture
def small_disk(tmp_path):
    """A real 800 KiB file system (tmpfs): a phase-1 checkpoint of the tiny model fits (about 415 KB) and so does the
    one at the phase boundary (phase 2's optimiser has no state yet); the next phase-2 one (about 610 KB, the
    optimiser state covers every parameter) does not. Mounting needs root."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a size-limited tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(disk)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_really_full_disk_keeps_the_last_checkpoint_and_resume_after_freeing_space_is_exact(tiny, tmp_path,
                                                                                               small_disk):
    """torch's own error for a short write ("unexpected pos", no OS error) on a file system that is really full."""
    full, cut = tmp_path / "full", small_disk / "run"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=10)
    run_subprocess(run_args(tiny, full, **common))
    proc = run_subprocess(run_args(tiny, cut, **common), check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors[0].startswith(f"error: no space left on the device to write checkpoint-6 in {cut / 'checkpoints'}")
    assert "checkpoint-4 is intact" in errors[0]
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-4"]  # not 6
    assert losses(cut) == losses(full)[:6]
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)  # space is freed
    run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)
    a, b = (json.loads((d / "training_summary.json").read_text()) for d in (full, cut))
    assert a["final_metrics"] == b["final_metrics"] and b["resumed"]
